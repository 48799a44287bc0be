package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

func TestProcessRuntime(t *testing.T) {
	e := newTestEnv(t, NameProcess)
	if e.rt.Capabilities().MemoryHibernate {
		t.Fatal("the process runtime claims memory hibernate")
	}
	t0 := time.Now()
	b := e.start(t, e.spec())
	t.Logf("cold start: %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()

	// Its own namespaces: PID 1 is the init, the hostname is the box's, the root is the overlay.
	if got := e.sh(t, b.ID, "tr '\\0' ' ' </proc/1/cmdline; echo; hostname; cat /etc/cocoonbox-image | head -1"); got != "/usr/local/sbin/cocoonbox-init \nbox\nname=base\n" {
		t.Fatalf("inside the box: %q", got)
	}
	// Root in the box cannot mount, make devices or chroot out: the bounding set is cut down.
	if got := e.sh(t, b.ID, "mount -t tmpfs none /mnt 2>/dev/null && echo mounted; "+
		"mknod /tmp/disk b 254 0 2>/dev/null && echo made; chroot / true 2>/dev/null && echo chrooted; echo done"); got != "done\n" {
		t.Fatalf("privileged operations in the box: %q", got)
	}
	out, errOut, code, err := e.exec(b.ID, "sh", "-c", "echo out; echo err >&2; exit 3")
	if err != nil || code != 3 || out != "out\n" || errOut != "err\n" {
		t.Fatalf("exec: out %q err %q code %d, %v", out, errOut, code, err)
	}
	if _, _, _, err := e.exec(b.ID, "no-such-binary"); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("missing binary: %v, want ErrBadCommand", err)
	}
	const n = 10
	t0 = time.Now()
	for i := 0; i < n; i++ {
		e.sh(t, b.ID, "true")
	}
	t.Logf("exec round trip: %v", time.Since(t0)/n)

	e.startServers(t, b.ID)
	e.checkHalfClose(t, b.ID)
	e.checkPortClosed(t, b.ID)
	if s, err := e.rt.Stats(ctx, b.ID); err != nil || s.MemUsedBytes <= 0 {
		t.Fatalf("stats: %+v, %v", s, err)
	}

	// Hibernate stops every process and keeps the disk; wake boots the box again on it.
	e.sh(t, b.ID, "echo kept > /root/file; setsid sleep 1000 </dev/null >/dev/null 2>&1 &")
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.rt.State(ctx, b.ID, b.Dir); st != StateHibernated {
		t.Fatalf("state after hibernate: %s", st)
	}
	if _, _, _, err := e.exec(b.ID, "true"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("exec in a hibernated box: %v, want ErrNotRunning", err)
	}
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got := e.sh(t, b.ID, "cat /root/file; pgrep -c sleep || true"); got != "kept\n0\n" {
		t.Fatalf("after wake: %q (want the file, and no process from before)", got)
	}

	// Snapshot, then a new box seeded from it.
	dst := filepath.Join(shortTempDir(t), "ck")
	if err := e.rt.Snapshot(ctx, b.ID, dst); err != nil {
		t.Fatal(err)
	}
	nb := e.spec()
	if err := e.rt.Seed(ctx, nb, dst); err != nil {
		t.Fatal(err)
	}
	e.start(t, nb)
	if got := e.sh(t, nb.ID, "cat /root/file"); got != "kept\n" {
		t.Fatalf("seeded box: %q", got)
	}

	// A restarted engine finds both boxes by id.
	rt, err := New(NameProcess, Options{DataDir: e.data, InsecureNoIsolation: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := rt.State(ctx, nb.ID, nb.Dir); err != nil || st != StateRunning {
		t.Fatalf("re-adopted state: %s, %v", st, err)
	}
	var o strings.Builder
	if _, err := rt.Exec(ctx, b.ID, ExecRequest{Argv: []string{"cat", "/root/file"}, Stdout: &o}); err != nil || o.String() != "kept\n" {
		t.Fatalf("exec through a new runtime: %q, %v", o.String(), err)
	}
}

func TestProcessExecCancelKillsChild(t *testing.T) {
	e := newTestEnv(t, NameProcess)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := e.rt.Exec(ctx, b.ID, ExecRequest{Argv: []string{"sh", "-c", "sleep 1000 & exec sleep 999"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled exec: %v, want DeadlineExceeded", err)
	}
	testutil.Eventually(t, testutil.WaitShort, "the cancelled command's process group to die", func() bool {
		out, _, _, _ := e.exec(b.ID, "ps", "-eo", "args")
		return !strings.Contains(out, "sleep 99")
	})
}

func TestNewChooses(t *testing.T) {
	dir := shortTempDir(t)
	if _, err := New("bogus", Options{DataDir: dir}); err == nil {
		t.Fatal("unknown runtime accepted")
	}
	if _, err := New("", Options{}); err == nil {
		t.Fatal("no data dir accepted")
	}
	// runsc is built by make deps and works here, so the automatic choice is gVisor.
	rt, err := New("", Options{DataDir: dir})
	if err != nil || rt.Name() != NameGVisor {
		t.Fatalf("auto: %v, %v; want gvisor", rt, err)
	}
	closeAtEnd(t, rt)
	if _, err := New(NameGVisor, Options{DataDir: dir, Runsc: "/nonexistent/runsc"}); err == nil {
		t.Fatal("a missing runsc accepted")
	}
}

// TestProcessSnapshotFreezesTheBox: a process box is frozen while its disk is copied (nothing
// in it runs, so nothing changes the disk under the walker), goes on after, and a box an engine
// left frozen is thawed when the next engine asks for its state.
func TestProcessSnapshotFreezesTheBox(t *testing.T) {
	e := newTestEnv(t, NameProcess)
	b := e.start(t, e.spec())
	e.sh(t, b.ID, "(while :; do echo x >> /root/grow; done) >/dev/null 2>&1 &")
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(diskPath(b.Dir), "root", "grow"))
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	testutil.Eventually(t, testutil.WaitShort, "the writer to start", func() bool { return size() > 0 })

	thaw, err := freezeCgroup(cgroupPath(b.ID))
	if err != nil {
		t.Fatal(err)
	}
	before := size()
	time.Sleep(200 * time.Millisecond)
	if after := size(); after != before {
		t.Fatalf("the file grew from %d to %d bytes while the box was frozen", before, after)
	}
	must(t, thaw())
	testutil.Eventually(t, testutil.WaitShort, "the writer to go on after the thaw", func() bool { return size() > before })

	// An engine that died mid-copy left the box frozen: State thaws it.
	if _, err := freezeCgroup(cgroupPath(b.ID)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if st, err := e.rt.State(ctx, b.ID, b.Dir); err != nil || st != StateRunning {
		t.Fatalf("state of the frozen box: %s, %v", st, err)
	}
	frozenAt := size()
	testutil.Eventually(t, testutil.WaitShort, "the box to run again after State", func() bool { return size() > frozenAt })

	// And Snapshot freezes it for the copy, then lets it go on.
	if err := e.rt.Snapshot(ctx, b.ID, filepath.Join(shortTempDir(t), "ck")); err != nil {
		t.Fatal(err)
	}
	if isFrozen(cgroupDir("freezer", cgroupPath(b.ID))) {
		t.Fatal("the box is still frozen after the snapshot")
	}
	copied := size()
	testutil.Eventually(t, testutil.WaitShort, "the writer to go on after the snapshot", func() bool { return size() > copied })
}
