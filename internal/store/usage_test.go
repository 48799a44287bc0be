package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestUsageLedger: model calls sum per run against the run's bound, and group by user, box, run
// and model, a user's view holding only their own calls.
func TestUsageLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	abox, bbox := newBox(t, st, alice, "dev").ID, newBox(t, st, bob, "dev").ID
	for _, nr := range []store.NewAgentRun{
		{ID: "run_a", BoxID: abox, Owner: alice, Task: "t", Provider: "openai", Model: "m1", MaxTokens: 100},
		{ID: "run_b", BoxID: bbox, Owner: bob, Task: "t", Provider: "openai", Model: "m2"},
	} {
		if _, err := st.CreateAgentRun(ctx, nr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: "run_c", BoxID: abox, Owner: alice, Task: "t", Model: "m1", MaxTokens: -1}); !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorField(err) != "max_tokens" {
		t.Fatalf("a negative bound: %v", err)
	}
	if used, limit, err := st.RunTokens(ctx, "run_a"); err != nil || used != 0 || limit != 100 {
		t.Fatalf("a run without calls: %d of %d, %v", used, limit, err)
	}
	for _, c := range []store.ModelCall{
		{RunID: "run_a", Step: 1, BoxID: abox, User: alice, Model: "m1", Status: 200, InputTokens: 30, OutputTokens: 5, CachedTokens: 10, Latency: time.Second},
		{RunID: "run_a", Step: 2, BoxID: abox, User: alice, Model: "m1", Status: 200, InputTokens: 40, OutputTokens: 7},
		{RunID: "run_b", Step: 1, BoxID: bbox, User: bob, Model: "m2", Status: 200, InputTokens: 1000, OutputTokens: 1},
		{RunID: "run_b", Step: 2, BoxID: bbox, User: bob, Model: "m2", Status: 529},
	} {
		if err := st.RecordModelCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if used, limit, err := st.RunTokens(ctx, "run_a"); err != nil || used != 82 || limit != 100 {
		t.Fatalf("run_a spent %d of %d, %v; want 82 of 100", used, limit, err)
	}
	if _, _, err := st.RunTokens(ctx, "run_x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown run: %v", err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{TokensPerMonth: ptr(int64(90))}); err != nil {
		t.Fatal(err)
	}
	if sp, err := st.RunSpend(ctx, "run_a"); err != nil || sp != (store.Spend{RunUsed: 82, RunLimit: 100, UserUsed: 82, UserLimit: 90}) {
		t.Fatalf("run_a's spend: %+v, %v", sp, err)
	}
	if b, err := st.UserBudget(ctx, alice); err != nil || b.TokensPerMonth != 90 || b.TokensUsed != 82 {
		t.Fatalf("alice's budget: %+v, %v", b, err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{TokensPerMonth: ptr(int64(-1))}); !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorField(err) != "tokens_per_month" {
		t.Fatalf("a negative budget: %v", err)
	}
	if err := st.SetUserBudget(ctx, "usr_nobody", store.BudgetChange{TokensPerMonth: ptr(int64(5))}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown user's budget: %v", err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{TokensPerMonth: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if sp, err := st.RunSpend(ctx, "run_b"); err != nil || sp.UserLimit != 0 || sp.UserUsed != 1001 || sp.RunLimit != 0 {
		t.Fatalf("run_b's spend, no bounds: %+v, %v", sp, err)
	}
	all, err := st.Usage(ctx, store.UsageFilter{By: store.UsageByUser})
	if err != nil || len(all) != 2 || all[0].UserName != "bob" || all[0].Calls != 2 || all[0].InputTokens != 1000 ||
		all[1].UserName != "alice" || all[1].InputTokens != 70 || all[1].OutputTokens != 12 || all[1].CachedTokens != 10 {
		t.Fatalf("by user: %+v, %v", all, err)
	}
	mine, err := st.Usage(ctx, store.UsageFilter{By: store.UsageByRun, User: alice})
	if err != nil || len(mine) != 1 || mine[0].Key != "run_a" || mine[0].Model != "m1" || mine[0].Calls != 2 {
		t.Fatalf("alice's runs: %+v, %v", mine, err)
	}
	if later, err := st.Usage(ctx, store.UsageFilter{By: store.UsageByModel, Since: time.Now().Add(time.Hour)}); err != nil || len(later) != 0 {
		t.Fatalf("since an hour from now: %+v, %v", later, err)
	}
	if _, err := st.Usage(ctx, store.UsageFilter{By: "day"}); !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorField(err) != "by" {
		t.Fatalf("grouped by day: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBoxRuntime: a box's running time starts when its row says running and ends when it says
// hibernated (or another stopped state), once; the owner's box-hours this month count the
// times that ended and the one under way, beside the box-hours budget an admin set.
func TestBoxRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev").ID
	for _, s := range []cocoonbox.BoxState{cocoonbox.BoxStateRunning, cocoonbox.BoxStateSnapshotting, cocoonbox.BoxStateRunning} {
		if err := st.SetBoxState(ctx, box, s, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	running, err := st.UserBudget(ctx, alice)
	if err != nil || running.BoxHoursUsed <= 0 {
		t.Fatalf("a box under way: %+v, %v; want some hours", running, err)
	}
	for _, s := range []cocoonbox.BoxState{cocoonbox.BoxStateHibernating, cocoonbox.BoxStateHibernated} {
		if err := st.SetBoxState(ctx, box, s, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	stopped, err := st.UserBudget(ctx, alice)
	if err != nil || stopped.BoxHoursUsed < running.BoxHoursUsed || stopped.BoxHoursUsed > running.BoxHoursUsed+1.0/3600 {
		t.Fatalf("after the hibernate: %+v, %v; want the time it ran, once", stopped, err)
	}
	time.Sleep(20 * time.Millisecond)
	if later, err := st.UserBudget(ctx, alice); err != nil || later.BoxHoursUsed != stopped.BoxHoursUsed {
		t.Fatalf("a hibernated box's hours grew: %v then %v, %v", stopped.BoxHoursUsed, later.BoxHoursUsed, err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{BoxHoursPerMonth: ptr(2.5)}); err != nil {
		t.Fatal(err)
	}
	if b, err := st.UserBudget(ctx, alice); err != nil || b.BoxHoursPerMonth != 2.5 || b.TokensPerMonth != 0 {
		t.Fatalf("alice's budget: %+v, %v", b, err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{BoxHoursPerMonth: ptr(-1.0)}); cocoonbox.ErrorField(err) != "box_hours_per_month" {
		t.Fatalf("a negative box-hours budget: %v", err)
	}
}

// TestBoxHoursOfBox: a box's owner's box-hours and budget, read by the box.
func TestBoxHoursOfBox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev").ID
	if h, err := st.BoxHoursOfBox(ctx, box); err != nil || h.Owner != alice || h.Limit != 0 || h.Used != 0 {
		t.Fatalf("no budget: %+v, %v", h, err)
	}
	if err := st.SetBoxState(ctx, box, cocoonbox.BoxStateRunning, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := st.SetUserBudget(ctx, alice, store.BudgetChange{BoxHoursPerMonth: ptr(1.0)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if h, err := st.BoxHoursOfBox(ctx, box); err != nil || h.Limit != 1 || h.Used <= 0 {
		t.Fatalf("a running box under a budget: %+v, %v", h, err)
	}
	if h, err := st.BoxHoursOfUser(ctx, alice); err != nil || h.Limit != 1 || h.Used <= 0 {
		t.Fatalf("by user: %+v, %v", h, err)
	}
	if _, err := st.BoxHoursOfBox(ctx, cocoonbox.NewBoxID()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown box: %v", err)
	}
}

// TestBoxUsage: a box's hours are the time it ran since the window's start, and its snapshot
// bytes what its complete snapshots hold; another user's boxes are not a user's.
func TestBoxUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	dev := newBox(t, st, alice, "dev").ID
	newBox(t, st, bob, "other")
	since := time.Now().Add(-time.Hour)
	for _, s := range []cocoonbox.BoxState{cocoonbox.BoxStateRunning, cocoonbox.BoxStateHibernated} {
		if err := st.SetBoxState(ctx, dev, s, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	for i, bytes := range []int64{1000, 234} {
		s, err := st.BeginSnapshot(ctx, store.NewSnapshot{ID: snapID(i + 1), BoxID: dev, ObjectKey: "snapshots/" + snapID(i+1)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CompleteSnapshot(ctx, s.ID, bytes, sum("box usage"), 3); err != nil {
			t.Fatal(err)
		}
	}
	// One that never completed holds nothing.
	if _, err := st.BeginSnapshot(ctx, store.NewSnapshot{ID: snapID(9), BoxID: dev, ObjectKey: "snapshots/" + snapID(9)}); err != nil {
		t.Fatal(err)
	}
	use, err := st.BoxUsage(ctx, since, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(use) != 1 || use[0].Box != string(dev) || use[0].Name != "dev" || use[0].OwnerName != "alice" ||
		use[0].Snapshots != 2 || use[0].SnapshotBytes != 1234 || use[0].Hours <= 0 || use[0].Hours > 1.0/60 {
		t.Fatalf("alice's box usage: %+v", use)
	}
	all, err := st.BoxUsage(ctx, since, "")
	if err != nil || len(all) != 2 || all[0].Box != string(dev) || all[1].Hours != 0 {
		t.Fatalf("everyone's box usage: %+v, %v", all, err)
	}
	if later, err := st.BoxUsage(ctx, time.Now(), alice); err != nil || len(later) != 1 || later[0].Hours != 0 || later[0].SnapshotBytes != 1234 {
		t.Fatalf("since now: %+v, %v; want no hours and the snapshots still stored", later, err)
	}
}
