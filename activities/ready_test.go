package activities

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
)

// TestCreateInTwoCalls: a create's claim writes the box row while the engine claims, and its
// ready probe writes the running row once the sandbox answers. A row that cannot be written fails
// the claim, whose next try adopts the sandbox the engine made, and leaves the running row to the
// workflow.
func TestCreateInTwoCalls(t *testing.T) {
	f, rows, a, env := newRowsEnv(t)
	box := cocoonbox.BoxID("bx_0123456789abcdef")
	claim := ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1,
		Record: &RecordBoxInput{BoxID: box, Owner: "us_1", Name: "b", Size: cocoonbox.SizeSmall}}

	rows.fail = errors.New("the database is not answering")
	if _, err := env.ExecuteActivity(a.Claim, claim); err == nil || !strings.Contains(err.Error(), "not answering") {
		t.Fatalf("claim with the row failing: %v, want the row's failure", err)
	}
	rows.fail = nil
	v, err := env.ExecuteActivity(a.Claim, claim)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var claimed ClaimResult
	if err := v.Get(&claimed); err != nil {
		t.Fatal(err)
	}
	if !claimed.Adopted || f.Calls("claim") != 1 {
		t.Fatalf("second try: %+v after %d engine claims; want the first try's sandbox adopted, one claim", claimed, f.Calls("claim"))
	}
	if got := rows.boxes[box]; got.State != cocoonbox.BoxStateCreating || got.Owner != "us_1" {
		t.Fatalf("box row after the claim: %+v, want it creating for us_1", got)
	}

	ready := ReadyRecordedInput{SandboxInput: SandboxInput{BoxID: box, SandboxID: claimed.SandboxID},
		Then: SetStateInput{BoxID: box, State: cocoonbox.BoxStateRunning, SandboxID: claimed.SandboxID}}
	rows.fail = errors.New("the database is not answering")
	if res := readyRecorded(t, env, a, ready); res.Settled {
		t.Fatal("the ready probe says it wrote a row the database refused")
	}
	rows.fail = nil
	if res := readyRecorded(t, env, a, ready); !res.Settled {
		t.Fatal("the ready probe did not write the running row")
	}
	if got := rows.boxes[box].State; got != cocoonbox.BoxStateRunning {
		t.Fatalf("box row says %s, want running", got)
	}
}

func readyRecorded(t *testing.T, env *testsuite.TestActivityEnvironment, a *Sandbox, in ReadyRecordedInput) ReadyRecordedResult {
	t.Helper()
	v, err := env.ExecuteActivity(a.ReadyRecorded, in)
	if err != nil {
		t.Fatalf("ready probe: %v", err)
	}
	var res ReadyRecordedResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}
