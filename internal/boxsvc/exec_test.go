package boxsvc_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestExecValidation: a bad request is refused naming its field, before it reaches the box.
func TestExecValidation(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ann := e.users[cocoonbox.RoleOwner]
	for _, tc := range []struct {
		req        boxsvc.ExecRequest
		field, msg string
	}{
		{boxsvc.ExecRequest{}, "argv", "argv: is required: the command and its arguments"},
		{boxsvc.ExecRequest{Argv: []string{"", "x"}}, "argv", "argv: is required: the command and its arguments"},
		{boxsvc.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: -1}, "timeout_seconds", "timeout_seconds: must be 0 to 3600, got -1"},
		{boxsvc.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 3601}, "timeout_seconds", "timeout_seconds: must be 0 to 3600, got 3601"},
		{boxsvc.ExecRequest{Argv: []string{"true"}, Cwd: "tmp"}, "cwd", `cwd: must be an absolute path, got "tmp"`},
	} {
		_, err := e.svc.Exec(context.Background(), ann, e.box, tc.req)
		wantError(t, "exec "+strings.Join(tc.req.Argv, " "), err, cocoonbox.EInvalid, tc.field, tc.msg)
	}
	if n := len(e.sandbox.Execs()); n != 0 {
		t.Fatalf("invalid requests reached the box: %+v", e.sandbox.Execs())
	}
}

// TestExecRuns: a command runs in the box with its cwd and environment; a non-zero exit is a
// result with its output, and a command given no timeout gets the default one.
func TestExecRuns(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	res, err := e.svc.Exec(context.Background(), e.users[cocoonbox.RoleDriver], e.box, boxsvc.ExecRequest{
		Argv: []string{"sh", "-c", `echo "$GREETING from $(pwd)"; echo oops >&2; exit 3`},
		Cwd:  "/", Env: map[string]string{"GREETING": "hi"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res != (boxsvc.ExecResult{ExitCode: 3, Stdout: "hi from /\n", Stderr: "oops\n"}) {
		t.Fatalf("result %+v", res)
	}
	if got := e.sandbox.Execs(); len(got) != 1 || got[0].TimeoutSeconds != boxsvc.DefaultExecTimeout {
		t.Fatalf("engine got %+v, want one exec with the default timeout %d", got, boxsvc.DefaultExecTimeout)
	}
}

// TestExecReadsTheRow: a call that needs only the role reaches a box whose row says it runs on
// the row alone, without a status query (which costs more than the rest of the checks and waits
// for any workflow task of the box), and asks the workflow whenever the row says anything else
// or names a sandbox other than the one its token opens.
func TestExecReadsTheRow(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	e.temporal.mu.Lock()
	delete(e.temporal.status, workflows.BoxWorkflowID(e.box)) // the workflow answers no query
	e.temporal.mu.Unlock()
	for _, tc := range []struct {
		state     cocoonbox.BoxState
		sandbox   string
		wantQuery bool
	}{
		{cocoonbox.BoxStateRunning, e.ref.ID, false},
		{cocoonbox.BoxStateSnapshotting, e.ref.ID, false},
		{cocoonbox.BoxStateRunning, "sb_00000000000000ff", true}, // a restore swapped its sandbox
		{cocoonbox.BoxStateHibernating, e.ref.ID, true},
		{cocoonbox.BoxStateHibernated, e.ref.ID, true},
		{cocoonbox.BoxStateCreating, "", true},
	} {
		if err := e.st.SetBoxState(ctx, e.box, tc.state, tc.sandbox, ""); err != nil {
			t.Fatal(err)
		}
		before := e.temporal.queried()
		_, err := e.svc.Exec(ctx, e.users[cocoonbox.RoleDriver], e.box, boxsvc.ExecRequest{Argv: []string{"true"}})
		asked := e.temporal.queried() > before
		switch {
		case asked != tc.wantQuery:
			t.Errorf("row %s on %q: asked the workflow %v, want %v", tc.state, tc.sandbox, asked, tc.wantQuery)
		case !tc.wantQuery && err != nil:
			t.Errorf("row %s on %q: %v", tc.state, tc.sandbox, err)
		case tc.wantQuery && err == nil:
			t.Errorf("row %s on %q: ran with no workflow to ask", tc.state, tc.sandbox)
		}
	}
}

// TestExecEngineErrors: what the engine answers a failed exec reaches the caller with a code and
// a message saying what to do: output too large, a timeout naming the field and its value, a
// busy engine, a sandbox the engine lost, a command the box refused.
func TestExecEngineErrors(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	ann := e.users[cocoonbox.RoleOwner]
	run := func(req boxsvc.ExecRequest) error { _, err := e.svc.Exec(ctx, ann, e.box, req); return err }

	wantError(t, "output over the limit", run(boxsvc.ExecRequest{Argv: []string{"head", "-c", "9000000", "/dev/zero"}}),
		cocoonbox.EInvalid, "", "the command's output is over 8 MiB; redirect it to a file")
	wantError(t, "past its timeout", run(boxsvc.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutSeconds: 1}),
		cocoonbox.EInvalid, "timeout_seconds", "timeout_seconds: the command ran past 1 s and was killed")
	wantError(t, "missing cwd", run(boxsvc.ExecRequest{Argv: []string{"true"}, Cwd: "/nonexistent-dir"}),
		cocoonbox.EInvalid, "", `the box refused the command: cwd "/nonexistent-dir" does not exist`)
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		e.engine.FailNext(sandboxtest.VerbExec, sandboxtest.Fault{Status: status, Message: "draining"})
		wantError(t, http.StatusText(status), run(boxsvc.ExecRequest{Argv: []string{"true"}}),
			cocoonbox.EUnavailable, "", "the sandbox engine is busy or down; try again")
	}
	e.engine.Lose(e.ref.ID)
	wantError(t, "lost sandbox", run(boxsvc.ExecRequest{Argv: []string{"true"}}),
		cocoonbox.EUnavailable, "", "the box's sandbox is gone; wake the box to rebuild it")
}

// TestExecKeepsTheBoxAwake: a command that runs longer than the keep-awake period touches its box
// while it runs (so a long build is never idle-hibernated under), and stops touching once it
// ends.
func TestExecKeepsTheBoxAwake(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	e.svc.KeepAwakeEvery = 50 * time.Millisecond
	touches := func() int {
		e.temporal.mu.Lock()
		defer e.temporal.mu.Unlock()
		return e.temporal.signals[workflows.SignalTouch]
	}
	before := touches()
	e.exec(t, "sleep", "1")
	// One touch after the exec, and one per period while it ran: at least a handful.
	testutil.Eventually(t, testutil.WaitShort, "the touches of the exec to arrive", func() bool { return touches()-before >= 5 })
	after := touches()
	time.Sleep(300 * time.Millisecond)
	if n := touches() - after; n > 1 {
		t.Errorf("%d touches after the exec ended", n)
	}
}

// TestTouchesHeldBack: execs back to back touch their box once at once and once more at the
// end of the touch interval, not once each: a touch is a workflow task the next exec's status
// query would wait for. The last use still reaches the workflow.
func TestTouchesHeldBack(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	touches := func() int {
		e.temporal.mu.Lock()
		defer e.temporal.mu.Unlock()
		return e.temporal.signals[workflows.SignalTouch]
	}
	before := touches()
	start := time.Now()
	for range 20 {
		e.exec(t, "true")
	}
	// One touch at once, one per interval the execs lasted, and the held-back one after them.
	most := 2 + int(time.Since(start)/time.Second)
	testutil.Eventually(t, testutil.WaitShort, "the held-back touch after the last exec", func() bool { return touches()-before >= 2 })
	time.Sleep(300 * time.Millisecond)
	if n := touches() - before; n > most {
		t.Errorf("20 execs in a row sent %d touches, want at most %d", n, most)
	}
}

// TestExecStdin: a command reads the standard input it is given; more than the limit is refused
// naming the field, before anything runs.
func TestExecStdin(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	owner := e.users[cocoonbox.RoleOwner]
	res, err := e.svc.Exec(ctx, owner, e.box, boxsvc.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: []byte("hello, box")})
	if err != nil || strings.TrimSpace(res.Stdout) != "10" {
		t.Fatalf("wc -c of 10 bytes: %+v %v", res, err)
	}
	before := len(e.sandbox.Execs())
	_, err = e.svc.Exec(ctx, owner, e.box, boxsvc.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: make([]byte, sandbox.MaxExecStdin+1)})
	if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || cocoonbox.ErrorField(err) != "stdin" {
		t.Fatalf("oversized stdin: %v", err)
	}
	if len(e.sandbox.Execs()) != before {
		t.Error("the oversized stdin reached the box")
	}
}
