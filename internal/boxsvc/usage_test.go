package boxsvc_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/store"
)

// TestUsageCosts: the ledger's tokens cost the configured prices, cached input at its own; a
// user's groups cost the sum over their models; everyone's usage needs an admin.
func TestUsageCosts(t *testing.T) {
	e := newRunEnv(t)
	ctx := context.Background()
	e.svc.Agent.Prices = map[string]config.Price{
		"m":  {Input: 2, CachedInput: 0.5, Output: 8},
		"m2": {Input: 1, Output: 4},
	}
	for _, c := range []store.ModelCall{
		{RunID: e.run, Step: 1, BoxID: e.box, User: e.ann, Model: "m", Status: 200, InputTokens: 1_000_000, CachedTokens: 400_000, OutputTokens: 100_000},
		{RunID: e.run, Step: 2, BoxID: e.box, User: e.ann, Model: "m2", Status: 200, InputTokens: 500_000, OutputTokens: 0},
		{RunID: e.run, Step: 3, BoxID: e.box, User: e.ann, Model: "unpriced", Status: 200, InputTokens: 9_000_000},
	} {
		if err := e.st.RecordModelCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	ann := store.User{ID: e.ann}
	u, err := e.svc.Usage(ctx, ann, store.UsageByModel, time.Time{}, false)
	if err != nil {
		t.Fatal(err)
	}
	costs := map[string]float64{}
	for _, r := range u.Rows {
		costs[r.Key] = r.CostUSD
	}
	// m: 0.6M at 2 + 0.4M cached at 0.5 + 0.1M out at 8 = 1.2 + 0.2 + 0.8; m2: 0.5M at 1.
	if !near(costs["m"], 2.2) || !near(costs["m2"], 0.5) || costs["unpriced"] != 0 {
		t.Fatalf("costs by model: %v; want m 2.2, m2 0.5, unpriced 0", costs)
	}
	// The run's steps each show what their calls used and cost.
	run, err := e.svc.GetRun(ctx, e.ann, e.run)
	if err != nil {
		t.Fatal(err)
	}
	if c := run.StepCosts; len(c) != 3 || c[1].Tokens != 1_100_000 || !near(c[1].CostUSD, 2.2) ||
		c[2].Tokens != 500_000 || !near(c[2].CostUSD, 0.5) || c[3].Tokens != 9_000_000 || c[3].CostUSD != 0 {
		t.Fatalf("step costs: %+v", c)
	}
	u, err = e.svc.Usage(ctx, ann, store.UsageByUser, time.Time{}, false)
	if err != nil || len(u.Rows) != 1 || !near(u.Rows[0].CostUSD, 2.7) || time.Since(u.Since) < 29*24*time.Hour {
		t.Fatalf("by user: %+v, %v; want one row costing 2.7 over the last 30 days", u, err)
	}
	if len(u.Boxes) != 1 || u.Boxes[0].Box != string(e.box) {
		t.Fatalf("ann's boxes: %+v; want her box", u.Boxes)
	}
	if _, err := e.svc.Usage(ctx, ann, store.UsageByRun, time.Time{}, true); cocoonbox.ErrorCode(err) != cocoonbox.EForbidden {
		t.Fatalf("everyone's usage as a user: %v; want forbidden", err)
	}
	if _, err := e.svc.Usage(ctx, ann, store.UsageByRun, time.Now().Add(time.Hour), false); cocoonbox.ErrorField(err) != "since" {
		t.Fatalf("since in the future: %v; want an error naming since", err)
	}
	if u, err := e.svc.Usage(ctx, store.User{ID: e.vic}, store.UsageByRun, time.Time{}, false); err != nil || len(u.Rows) != 0 {
		t.Fatalf("another user's view: %+v, %v; want nothing of ann's", u, err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestBoxHoursBudget: once the owner's boxes ran their monthly box-hours, a create and a wake
// are refused as resource exhausted, saying so, before any workflow is asked.
func TestBoxHoursBudget(t *testing.T) {
	e := newRunEnv(t)
	ctx := context.Background()
	if err := e.st.SetBoxState(ctx, e.box, cocoonbox.BoxStateRunning, "", ""); err != nil {
		t.Fatal(err)
	}
	tiny := 1e-9 // hours: spent at once by the running box
	if err := e.st.SetUserBudget(ctx, e.ann, store.BudgetChange{BoxHoursPerMonth: &tiny}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := e.st.SetBoxState(ctx, e.box, cocoonbox.BoxStateHibernated, "", ""); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Wake(ctx, e.ann, e.box)
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || !strings.HasPrefix(cocoonbox.ErrorMessage(err), "budget: the boxes of user "+e.ann) {
		t.Fatalf("a wake over the box-hours budget: %v", err)
	}
	// Who may not wake the box learns nothing of its owner's budget.
	stranger, err := e.st.CreateUser(ctx, store.NewUser{Name: "stranger"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Wake(ctx, stranger.ID, e.box); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("a stranger's wake: %v; want not found", err)
	}
	if _, err := e.svc.Wake(ctx, e.vic, e.box); cocoonbox.ErrorCode(err) != cocoonbox.EForbidden {
		t.Fatalf("a viewer's wake: %v; want forbidden", err)
	}
	if _, err := e.svc.Create(ctx, e.ann, boxsvc.CreateRequest{Name: "another"}); cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted ||
		!strings.HasPrefix(cocoonbox.ErrorMessage(err), "budget: ") {
		t.Fatalf("a create over the box-hours budget: %v", err)
	}
}
