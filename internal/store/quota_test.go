package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestCreateBoxWithinIsRaceFree starts more concurrent creates than the quota allows: exactly
// the quota's number pass, every other one is resource_exhausted naming the limit, and another
// owner is not counted.
func TestCreateBoxWithinIsRaceFree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	ann, bob := newUser(t, st, "ann"), newUser(t, st, "bob")
	newBox(t, st, bob, "bobs") // another owner's box counts for nobody else
	const tries, limit = 8, 3
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			_, errs[i] = st.CreateBoxWithin(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: ann,
				Name: fmt.Sprintf("b%d", i), Size: cocoonbox.SizeSmall}, store.BoxQuota{Boxes: limit})
		})
	}
	wg.Wait()
	var ok int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrQuota) || cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted ||
			cocoonbox.ErrorMessage(err) != "quota: boxes per user (3) reached":
			t.Errorf("create over quota: %v", err)
		}
	}
	if boxes, err := st.ListBoxes(ctx, ann); ok != limit || err != nil || len(boxes) != limit {
		t.Fatalf("%d creates passed and %d boxes exist (%v); want %d", ok, len(boxes), err, limit)
	}
}

// TestCreateBoxWithinCountsSizes checks the vCPU and memory limits against the sum of the
// owner's box sizes, that deleted boxes free their share, and that a repeated create of a
// counted box still answers it.
func TestCreateBoxWithinCountsSizes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	ann := newUser(t, st, "ann")
	create := func(name string, size cocoonbox.Size, q store.BoxQuota) (store.Box, error) {
		return st.CreateBoxWithin(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: ann, Name: name, Size: size}, q)
	}
	// medium: 2 vCPUs, 1024 MB; large: 4 vCPUs, 4096 MB.
	cpu := store.BoxQuota{VCPUs: 5}
	first, err := create("one", cocoonbox.SizeMedium, cpu)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create("two", cocoonbox.SizeMedium, cpu); err != nil {
		t.Fatal(err)
	}
	_, err = create("three", cocoonbox.SizeMedium, cpu)
	if want := "quota: vCPUs per user (5) reached: your boxes have 4 vCPUs and a medium box needs 2 more"; cocoonbox.ErrorMessage(err) != want {
		t.Fatalf("third medium: %v; want %q", err, want)
	}
	if _, err := create("small", cocoonbox.SizeSmall, cpu); err != nil {
		t.Fatalf("a small box still fits: %v", err)
	}
	_, err = create("big", cocoonbox.SizeLarge, store.BoxQuota{MemoryMB: 6000})
	if !errors.Is(err, store.ErrQuota) || !strings.HasPrefix(cocoonbox.ErrorMessage(err), "quota: memory per user in MB (6000) reached") {
		t.Fatalf("large over memory: %v", err)
	}
	// The same create again, at the limit, is the same box.
	again, err := st.CreateBoxWithin(ctx, store.NewBox{ID: first.ID, Owner: ann, Name: "one", Size: cocoonbox.SizeMedium}, store.BoxQuota{Boxes: 1})
	if err != nil || again.ID != first.ID {
		t.Fatalf("repeated create at the limit: %+v, %v", again, err)
	}
	if err := st.SetBoxState(ctx, first.ID, cocoonbox.BoxStateDeleted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := create("three", cocoonbox.SizeMedium, cpu); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

// TestCreateAgentRunWithin checks the concurrent-runs quota: runs that ended free their slot.
func TestCreateAgentRunWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	ann := newUser(t, st, "ann")
	box := newBox(t, st, ann, "dev")
	run := func(id string) error {
		_, err := st.CreateAgentRunWithin(ctx, store.NewAgentRun{ID: id, BoxID: box.ID, Owner: ann, Task: "t", Provider: "openai", Model: "m"}, 2)
		return err
	}
	for _, id := range []string{"run_1", "run_2"} {
		if err := run(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := run("run_3"); !errors.Is(err, store.ErrQuota) || cocoonbox.ErrorMessage(err) != "quota: concurrent agent runs per user (2) reached" {
		t.Fatalf("third run: %v", err)
	}
	if err := run("run_2"); err != nil {
		t.Fatalf("repeated create of a counted run: %v", err)
	}
	if err := st.SetAgentRunState(ctx, "run_1", cocoonbox.AgentRunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if err := run("run_3"); err != nil {
		t.Fatalf("after a run ended: %v", err)
	}
}

// TestCreateAttemptsWithin: the runs of a best-of-N run are created all together or not at all:
// past the runs quota none is left behind (running, with no workflow), and a request sent again
// is not counted twice.
func TestCreateAttemptsWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	ann := newUser(t, st, "ann")
	box := newBox(t, st, ann, "dev")
	forks := []store.Box{newBox(t, st, ann, "f1"), newBox(t, st, ann, "f2"), newBox(t, st, ann, "f3")}
	if _, err := st.CreateAgentRunWithin(ctx, store.NewAgentRun{ID: "run_0", BoxID: box.ID, Owner: ann, Task: "t", Provider: "openai", Model: "m"}, 3); err != nil {
		t.Fatal(err)
	}
	attempts := func(id string, n int) error {
		a := store.Attempts{ID: id, BoxID: box.ID, Owner: ann, Task: "t", Model: "m"}
		var runs []store.NewAgentRun
		for i := range n {
			runID := fmt.Sprintf("run_%s_%d", id, i)
			a.Forks, a.Runs = append(a.Forks, forks[i].ID), append(a.Runs, runID)
			runs = append(runs, store.NewAgentRun{ID: runID, BoxID: forks[i].ID, Owner: ann, Task: "t", Provider: "openai", Model: "m"})
		}
		_, err := st.CreateAttemptsWithin(ctx, a, runs, 3)
		return err
	}
	if err := attempts("att_3", 3); !errors.Is(err, store.ErrQuota) || cocoonbox.ErrorMessage(err) != "quota: concurrent agent runs per user (3) reached" {
		t.Fatalf("three attempts beside a run, quota 3: %v", err)
	}
	for i := range 3 {
		if _, err := st.AgentRunByID(ctx, fmt.Sprintf("run_att_3_%d", i)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run %d of the refused attempts: %v, want not found", i, err)
		}
	}
	if _, err := st.AttemptsByID(ctx, "att_3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused attempts' row: %v, want not found", err)
	}
	if err := attempts("att_2", 2); err != nil {
		t.Fatalf("two attempts beside a run, quota 3: %v", err)
	}
	if err := attempts("att_2", 2); err != nil {
		t.Fatalf("the same two attempts again: %v", err)
	}
	if a, err := st.AttemptsByID(ctx, "att_2"); err != nil || len(a.Runs) != 2 || a.State != cocoonbox.AttemptsRunning {
		t.Fatalf("attempts row: %+v, %v", a, err)
	}
}
