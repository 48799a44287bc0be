package boxsvc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestDataPlaneAccessByRole holds the rules of access.go for the calls that reach into a box:
// exec, file reads and writes, and desktop input need the driver role, a screenshot the viewer
// role. Owner, admin and driver may do all; a viewer may only look, and is told which role the
// rest needs; a stranger is told the box is not found, as if it did not exist. A refused call
// reaches neither the sandbox nor the agent.
func TestDataPlaneAccessByRole(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	file := "/tmp/" + string(e.box) + "/notes.txt"
	e.exec(t, "sh", "-c", `mkdir -p "$(dirname "$1")" && echo hi > "$1"`, "sh", file)
	t.Cleanup(func() { e.exec(t, "rm", "-rf", "/tmp/"+string(e.box)) })

	ops := []struct {
		name string
		need cocoonbox.Role
		do   func(caller string) error
	}{
		{"exec", cocoonbox.RoleDriver, func(c string) error {
			_, err := e.svc.Exec(ctx, c, e.box, boxsvc.ExecRequest{Argv: []string{"true"}})
			return err
		}},
		{"read", cocoonbox.RoleDriver, func(c string) error { _, _, err := e.svc.ReadFile(ctx, c, e.box, file); return err }},
		{"write", cocoonbox.RoleDriver, func(c string) error {
			_, err := e.svc.WriteFile(ctx, c, e.box, file, []byte("by "+e.names[c]), 0)
			return err
		}},
		{"screenshot", cocoonbox.RoleViewer, func(c string) error { _, err := e.svc.Screenshot(ctx, c, e.box, 0); return err }},
		{"click", cocoonbox.RoleDriver, func(c string) error { return e.svc.Click(ctx, c, e.box, boxsvc.ClickRequest{X: 1, Y: 2}) }},
		{"type", cocoonbox.RoleDriver, func(c string) error { return e.svc.Type(ctx, c, e.box, "hello") }},
		{"key", cocoonbox.RoleDriver, func(c string) error { return e.svc.Key(ctx, c, e.box, "Return") }},
	}
	callers := []struct {
		role cocoonbox.Role // "" for the stranger
		id   string
	}{
		{cocoonbox.RoleOwner, e.users[cocoonbox.RoleOwner]}, {cocoonbox.RoleAdmin, e.users[cocoonbox.RoleAdmin]},
		{cocoonbox.RoleDriver, e.users[cocoonbox.RoleDriver]}, {cocoonbox.RoleViewer, e.users[cocoonbox.RoleViewer]},
		{"", e.stranger},
	}
	for _, op := range ops {
		for _, c := range callers {
			execs, inputs, shots := len(e.sandbox.Execs()), len(e.agent.Inputs()), e.agent.Calls(agentvmtest.MethodScreenshot)
			err := op.do(c.id)
			what := op.name + " by " + e.names[c.id]
			switch {
			case c.role == "":
				wantError(t, what, err, cocoonbox.ENotFound, "", "box "+string(e.box)+" not found")
			case !c.role.Allows(op.need):
				wantError(t, what, err, cocoonbox.EForbidden, "", "box "+string(e.box)+": this needs the "+string(op.need)+" role; you have "+string(c.role))
			case err != nil:
				t.Errorf("%s: %v; want it done", what, err)
			}
			if err != nil && (len(e.sandbox.Execs()) != execs || len(e.agent.Inputs()) != inputs || e.agent.Calls(agentvmtest.MethodScreenshot) != shots) {
				t.Errorf("%s was refused but reached the box", what)
			}
		}
	}
	// The write of the last driver-level caller (the driver) is what the file holds.
	if got := e.exec(t, "cat", file).Stdout; got != "by dan" {
		t.Errorf("file holds %q after the writes, want the driver's", got)
	}
	if got := len(e.agent.Inputs()); got != 9 {
		t.Errorf("agent carried out %d inputs, want 3 verbs by 3 callers", got)
	}
}

// TestDesktopInputWaitsForTheLeaseHolder: while a person holds the desktop's control lease, only
// they may send input; another driver is told who holds it, by name, and nothing reaches the
// desktop; looking stays open to a viewer.
func TestDesktopInputWaitsForTheLeaseHolder(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	ann, dan := e.users[cocoonbox.RoleOwner], e.users[cocoonbox.RoleDriver]
	e.temporal.set(workflows.Status{BoxID: e.box, State: cocoonbox.BoxStateRunning, SandboxID: e.ref.ID, Controller: ann})

	err := e.svc.Type(ctx, dan, e.box, "rm -rf /")
	wantError(t, "dan types while ann holds the lease", err, cocoonbox.EConflict, "",
		"box "+string(e.box)+": ann ("+ann+") holds the desktop's control lease; wait until they hand it back, or take over")
	if n := len(e.agent.Inputs()); n != 0 {
		t.Fatalf("refused input reached the desktop: %+v", e.agent.Inputs())
	}
	if err := e.svc.Click(ctx, ann, e.box, boxsvc.ClickRequest{X: 5, Y: 6, Button: "right"}); err != nil {
		t.Fatalf("the lease holder's click: %v", err)
	}
	if got := e.agent.Inputs(); len(got) != 1 || got[0] != (agentvmtest.Input{Verb: "click", X: 5, Y: 6, Button: "right"}) {
		t.Fatalf("inputs %+v, want ann's right click at (5, 6)", got)
	}
	if _, err := e.svc.Screenshot(ctx, e.users[cocoonbox.RoleViewer], e.box, 0); err != nil {
		t.Fatalf("viewer's screenshot while ann controls: %v", err)
	}
}

// TestDesktopErrors: the agent's refusals and failures reach the caller as domain errors it can
// act on: a point off the screen names the coordinate, an agent that is starting is worth a
// retry, and a screenshot comes back at the size asked for.
func TestDesktopErrors(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	ann := e.users[cocoonbox.RoleOwner]

	err := e.svc.Click(ctx, ann, e.box, boxsvc.ClickRequest{X: 5000, Y: 1})
	wantError(t, "click off the screen", err, cocoonbox.EInvalid, "", "x: 5000 is off the screen (width 1280)")
	wantError(t, "click with a bad button", e.svc.Click(ctx, ann, e.box, boxsvc.ClickRequest{Button: "back"}),
		cocoonbox.EInvalid, "button", `button: must be left, middle or right, got "back"`)
	e.agent.FailNext(agentvmtest.MethodKey, 1, codes.Unavailable, "display :0 not up")
	err = e.svc.Key(ctx, ann, e.box, "Return")
	if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Errorf("key while the display starts: %v; want unavailable", err)
	}
	if err := e.svc.Key(ctx, ann, e.box, "Return"); err != nil {
		t.Errorf("key once the display is up: %v", err)
	}
	shot, err := e.svc.Screenshot(ctx, ann, e.box, 640)
	if err != nil || shot.Width != 640 || shot.Height != 400 || shot.ScreenWidth != 1280 || len(shot.PNG) == 0 {
		t.Errorf("screenshot at 640: %dx%d of %dx%d, %v", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight, err)
	}
}
