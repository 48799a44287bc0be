package activities

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

// rootToken is the fake engine's root token in the tests of the calls that write box rows.
const rootToken = "root-token"

// newRowsEnv is an activity environment whose Sandbox activities call a fake engine (root token
// rootToken) and write box rows to rows.
func newRowsEnv(t *testing.T) (*sandboxtest.Fake, *memBoxes, *Sandbox, *testsuite.TestActivityEnvironment) {
	t.Helper()
	f := sandboxtest.New(t, sandboxtest.Options{RootToken: rootToken})
	rows := &memBoxes{}
	a := &Sandbox{Client: f.Client(rootToken), Tokens: &memTokens{}, Template: "base", Rows: &Store{Boxes: rows}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return f, rows, a, env
}

// TestHibernateRecorded: the box's row says hibernating before the engine is asked, and a row
// that cannot be written leaves the sandbox untouched (the API reaches a box whose row says it
// runs without asking its workflow), failing with what could not be written.
func TestHibernateRecorded(t *testing.T) {
	f, rows, a, env := newRowsEnv(t)
	box := cocoonbox.BoxID("bx_0123456789abcdef")
	if err := rows.CreateBox(t.Context(), cocoonbox.Box{ID: box, Owner: "us_1", Name: "b", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	v, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var claimed ClaimResult
	if err := v.Get(&claimed); err != nil {
		t.Fatal(err)
	}
	in := HibernateRecordedInput{
		SandboxInput: SandboxInput{BoxID: box, SandboxID: claimed.SandboxID},
		Record:       SetStateInput{BoxID: box, State: cocoonbox.BoxStateHibernating, SandboxID: claimed.SandboxID},
	}

	rows.fail = errors.New("the database is not answering")
	_, err = env.ExecuteActivity(a.HibernateRecorded, in)
	if err == nil || !strings.Contains(err.Error(), "hibernate: record the box's state") || !strings.Contains(err.Error(), "not answering") {
		t.Fatalf("hibernate with the row failing: %v, want the row's failure named", err)
	}
	if n := f.Calls("hibernate"); n != 0 {
		t.Fatalf("the engine was asked to hibernate %d times while the row said running", n)
	}

	rows.fail = nil
	if _, err := env.ExecuteActivity(a.HibernateRecorded, in); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if got := rows.boxes[box].State; got != cocoonbox.BoxStateHibernating {
		t.Fatalf("box row says %s, want hibernating", got)
	}
	if n := f.Calls("hibernate"); n != 1 {
		t.Fatalf("engine hibernates = %d, want 1", n)
	}

	// The hibernated row, when handed over, is written once the engine is done.
	if err := f.Client(rootToken).Wake(t.Context(), sandbox.SandboxRef{ID: claimed.SandboxID}); err != nil {
		t.Fatalf("wake: %v", err)
	}
	then := SetStateInput{BoxID: box, State: cocoonbox.BoxStateHibernated, SandboxID: claimed.SandboxID,
		Event: &EventInput{BoxID: box, Kind: "hibernated", Detail: "requested"}}
	in.Then = &then
	v, err = env.ExecuteActivity(a.HibernateRecorded, in)
	var res HibernateRecordedResult
	if err == nil {
		err = v.Get(&res)
	}
	if err != nil || !res.Settled {
		t.Fatalf("hibernate with the hibernated row: %+v, %v; want settled", res, err)
	}
	if got := rows.boxes[box].State; got != cocoonbox.BoxStateHibernated {
		t.Fatalf("box row says %s, want hibernated", got)
	}
	in.Then = nil

	// Without a store to write to, nothing is asked of the engine either.
	a.Rows = nil
	if _, err := env.ExecuteActivity(a.HibernateRecorded, in); err == nil || f.Calls("hibernate") != 2 {
		t.Fatalf("hibernate without rows: %v, engine hibernates %d", err, f.Calls("hibernate"))
	}
}
