package devstack_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestForkDesktop forks a desktop box that has a window open and a counter running, three ways
// through the API while someone watches it: each fork shows the window on its own desktop and
// has the counter going on from the fork point, none sees what another writes, each has a
// machine ID and a hostname of its own, the source's checkpoint is gone once they claimed from
// it, and they work on once the source is deleted. A fork that would pass the caller's quota is
// refused before the box is touched, and a fork of a hibernated fork comes from its hibernate
// image.
func TestForkDesktop(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	cfg.Quota.Boxes = 5 // the source, its three forks and one more: a fork of two is refused
	e := newDesktopEnv(t, cfg, 8*time.Minute)
	ctx := e.ctx

	e.mustRun(t, "setsid -f runuser -u user -- env DISPLAY=:0 xfce4-terminal --disable-server --title forkmark -x sleep infinity </dev/null >/dev/null 2>&1")
	var window string
	if err := testutil.Poll(ctx, 30*time.Second, func() error {
		var err error
		window, err = e.run("runuser -u user -- env DISPLAY=:0 xdotool search --name '^forkmark$'")
		return err
	}); err != nil {
		t.Fatalf("the forkmark window: %v", err)
	}
	pid := strings.TrimSpace(e.mustRun(t, `setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done' </dev/null >/dev/null 2>&1 & echo $!`))
	source := boxOf(e, e.id)
	if err := testutil.Poll(ctx, testutil.WaitShort, func() error {
		if n := source.count(); n < 3 {
			return fmt.Errorf("counter at %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sourceID := strings.TrimSpace(e.mustRun(t, "cat /etc/machine-id"))
	before := source.count()

	// Someone watches the source as it forks: the copy closes that connection (runsc saves no
	// box holding host sockets), and the fork goes ahead.
	view, err := e.open(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	if _, err := view.frame(); err != nil {
		t.Fatal(err)
	}
	auth := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.token)
	resp, err := e.api.ForkBox(auth, &cbv1.ForkBoxRequest{Box: string(e.id), Count: 3, RequestId: "fork-test-1"})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	// Sent again (its answer lost, say), the same request finds the same forks.
	again, err := e.api.ForkBox(auth, &cbv1.ForkBoxRequest{Box: string(e.id), Count: 3, RequestId: "fork-test-1"})
	if err != nil || len(again.GetBoxes()) != 3 {
		t.Fatalf("the fork sent again: %v, %v", again.GetBoxes(), err)
	}
	for i, b := range again.GetBoxes() {
		if b.GetId() != resp.GetBoxes()[i].GetId() || b.GetState() != string(cocoonbox.BoxStateRunning) {
			t.Fatalf("the fork sent again gave %s (%s), the first %s", b.GetId(), b.GetState(), resp.GetBoxes()[i].GetId())
		}
	}
	forks := resp.GetBoxes()
	if len(forks) != 3 || resp.GetPausedMs() <= 0 {
		t.Fatalf("fork gave %d boxes, the source paused %d ms; want 3 and a pause", len(forks), resp.GetPausedMs())
	}
	ids := map[string]string{sourceID: "the source"}
	for i, f := range forks {
		if f.GetState() != string(cocoonbox.BoxStateRunning) || f.GetParent() != string(e.id) || f.GetName() != "desk-fork-"+strconv.Itoa(i+1) {
			t.Fatalf("fork %d: %s %q, parent %q, last error %q", i, f.GetState(), f.GetName(), f.GetParent(), f.GetLastError())
		}
		b := boxOf(e, cocoonbox.BoxID(f.GetId()))
		if got := b.mustRun(t, "runuser -u user -- env DISPLAY=:0 xdotool search --name '^forkmark$'"); got != window {
			t.Fatalf("fork %d: forkmark window %q, want %q as in the source", i, got, window)
		}
		if got := strings.TrimSpace(b.mustRun(t, "kill -0 "+pid+" && echo alive")); got != "alive" {
			t.Fatalf("fork %d: the counter process %s is not there", i, pid)
		}
		at := b.count()
		if at < before {
			t.Fatalf("fork %d: the counter is at %d, below the %d before the fork", i, at, before)
		}
		if err := testutil.Poll(ctx, testutil.WaitShort, func() error {
			if n := b.count(); n <= at {
				return fmt.Errorf("counter still at %d", n)
			}
			return nil
		}); err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
		mid := strings.TrimSpace(b.mustRun(t, "cat /etc/machine-id"))
		if other, seen := ids[mid]; seen || len(mid) != 32 {
			t.Fatalf("fork %d: machine ID %q, the same as %s's", i, mid, other)
		}
		ids[mid] = f.GetName()
		// Its hostname is its own name, in the kernel and resolving to the box, as a program
		// started after the fork sees it.
		want := "desk-fork-" + strconv.Itoa(i+1)
		if got := strings.TrimSpace(b.mustRun(t, "hostname; cat /etc/hostname; getent hosts $(hostname) | awk '{print $1}'")); got != want+"\n"+want+"\n127.0.1.1" {
			t.Fatalf("fork %d: hostname, /etc/hostname and its address: %q, want %s twice and 127.0.1.1", i, got, want)
		}
		// Its own desktop, through the edge, shows a frame.
		e.id, e.ref = cocoonbox.BoxID(f.GetId()), sandbox.SandboxRef{}
		c, err := e.open(ctx, false)
		if err == nil {
			_, err = c.frame()
			_ = c.Close()
		}
		e.id, e.ref = source.id, sandbox.SandboxRef{}
		if err != nil {
			t.Fatalf("fork %d: desktop: %v", i, err)
		}
	}
	t.Logf("3 forks of %s go on from counter %d with window %s; the source paused at most %d ms", e.id, before, strings.TrimSpace(window), resp.GetPausedMs())

	first := boxOf(e, cocoonbox.BoxID(forks[0].GetId()))
	first.mustRun(t, "echo mine > /home/user/only-first")
	for _, b := range []*forkBox{source, boxOf(e, cocoonbox.BoxID(forks[1].GetId())), boxOf(e, cocoonbox.BoxID(forks[2].GetId()))} {
		if got := b.mustRun(t, "test -e /home/user/only-first && echo seen || echo absent"); got != "absent\n" {
			t.Fatalf("a file written in the first fork is %s in %s", strings.TrimSpace(got), b.id)
		}
	}
	if err := testutil.Poll(ctx, testutil.WaitShort, func() error {
		cks, err := e.eng.ListCheckpoints(ctx)
		if err != nil {
			return err
		}
		for _, ck := range cks {
			if strings.HasPrefix(ck.Name, "fork:") {
				return fmt.Errorf("checkpoint %s (%s) is still kept", ck.ID, ck.Name)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("once the forks claimed: %v", err)
	}

	// Over the quota: nothing is checkpointed, the box is not paused, no row is left.
	if _, err := e.d.Boxes.Fork(ctx, e.owner.ID, e.id, boxsvc.ForkRequest{Count: 2}); cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || !strings.Contains(err.Error(), "boxes") {
		t.Fatalf("a fork past the quota of 5 boxes: %v", err)
	}
	if list, err := e.d.Boxes.List(ctx, e.owner.ID); err != nil || len(list) != 4 {
		t.Fatalf("after a refused fork the owner has %d boxes (%v), want 4", len(list), err)
	}

	// A fork of a hibernated fork comes from its hibernate image and leaves it asleep.
	if v, err := e.d.Boxes.Hibernate(ctx, e.owner.ID, first.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate the first fork: %+v, %v", v.State, err)
	}
	deeper, err := e.d.Boxes.Fork(ctx, e.owner.ID, first.id, boxsvc.ForkRequest{})
	if err != nil || len(deeper.Boxes) != 1 || deeper.Boxes[0].Parent != first.id || deeper.Boxes[0].Name != "desk-fork-1-fork-1" {
		t.Fatalf("fork of the hibernated first fork: %+v, %v", deeper.Boxes, err)
	}
	grand := boxOf(e, deeper.Boxes[0].BoxID)
	if got := grand.mustRun(t, "cat /home/user/only-first; kill -0 "+pid+" && echo alive"); got != "mine\nalive\n" {
		t.Fatalf("the fork of a hibernated fork holds %q", got)
	}
	if v, err := e.d.Boxes.Get(ctx, e.owner.ID, first.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("the hibernated fork after a fork of it: %+v, %v", v.State, err)
	}
	forks = append(forks, &cbv1.Box{Id: string(grand.id)})

	if v, err := e.d.Boxes.Delete(ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateDeleted {
		t.Fatalf("delete the source: %+v, %v", v.State, err)
	}
	for i, f := range forks {
		b := boxOf(e, cocoonbox.BoxID(f.GetId()))
		if v, err := e.d.Boxes.Get(ctx, e.owner.ID, b.id); err != nil || v.Parent == "" || v.ForkedAt.IsZero() {
			t.Fatalf("fork %d: parent %q at %v, %v", i, v.Parent, v.ForkedAt, err)
		}
		if i == 0 {
			continue // asleep: an exec through the engine would wake it behind its workflow
		}
		at := b.count()
		if err := testutil.Poll(ctx, testutil.WaitShort, func() error {
			if n := b.count(); n <= at {
				return fmt.Errorf("counter still at %d", n)
			}
			return nil
		}); err != nil {
			t.Fatalf("fork %d after its source was deleted: %v", i, err)
		}
	}
}

// forkBox runs commands in one box of a desktopEnv's stack.
type forkBox struct {
	e  *desktopEnv
	id cocoonbox.BoxID
}

func boxOf(e *desktopEnv, id cocoonbox.BoxID) *forkBox { return &forkBox{e: e, id: id} }

func (b *forkBox) run(script string) (string, error) {
	v, err := b.e.d.Boxes.Get(b.e.ctx, b.e.owner.ID, b.id)
	if err != nil {
		return "", err
	}
	row, err := b.e.eng.Get(b.e.ctx, v.SandboxID)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(b.e.ctx, time.Minute)
	defer cancel()
	res, err := b.e.eng.Exec(ctx, sandbox.SandboxRef{ID: v.SandboxID, Token: row.Token}, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutSeconds: 60})
	if err != nil {
		return "", fmt.Errorf("exec %q in %s: %w", script, b.id, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exec %q in %s: exit %d: %s", script, b.id, res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}

func (b *forkBox) mustRun(tb testing.TB, script string) string {
	tb.Helper()
	out, err := b.run(script)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// count is the value the box's counter last wrote; -1 when it cannot be read.
func (b *forkBox) count() int {
	for range 10 {
		out, err := b.run("cat /tmp/count")
		if n, aerr := strconv.Atoi(strings.TrimSpace(out)); err == nil && aerr == nil {
			return n
		}
	}
	return -1
}
