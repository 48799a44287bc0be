package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

func TestGVisorExec(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	t0 := time.Now()
	b := e.start(t, e.spec())
	t.Logf("cold start (create, start, first exec answered): %v", time.Since(t0))

	out, errOut, code, err := e.exec(b.ID, "sh", "-c", "echo out; echo err >&2; exit 3")
	if err != nil || code != 3 || out != "out\n" || errOut != "err\n" {
		t.Fatalf("exec: out %q err %q code %d, %v", out, errOut, code, err)
	}
	if _, _, _, err := e.exec(b.ID, "no-such-binary"); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("missing binary: %v, want ErrBadCommand", err)
	}
	if _, _, _, err := e.exec(b.ID); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("empty argv: %v, want ErrBadCommand", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	var o strings.Builder
	code, err = e.rt.Exec(ctx, b.ID, ExecRequest{
		Argv: []string{"sh", "-c", `echo "$PWD $GREETING"; cat`}, Cwd: "/etc", Env: []string{"GREETING=hi"},
		Stdin: strings.NewReader("from stdin"), Stdout: &o,
	})
	if err != nil || code != 0 || o.String() != "/etc hi\nfrom stdin" {
		t.Fatalf("cwd, env, stdin: %q, code %d, %v", o.String(), code, err)
	}
	if _, err := e.rt.Exec(ctx, b.ID, ExecRequest{Argv: []string{"true"}, Cwd: "/nowhere"}); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("bad cwd: %v, want ErrBadCommand", err)
	}
	if _, err := e.rt.Exec(ctx, "sb_unknown", ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown box: %v, want ErrNotFound", err)
	}

	// Round trip of a trivial command: runsc exec of the relay, then the init's fork/exec.
	const n = 10
	t0 = time.Now()
	for i := 0; i < n; i++ {
		if _, _, code, err := e.exec(b.ID, "true"); err != nil || code != 0 {
			t.Fatalf("true: %d, %v", code, err)
		}
	}
	t.Logf("exec round trip: %v", time.Since(t0)/n)

	// Root in the box has not the capability the init keeps to set a fork's hostname, and
	// cannot set it; the init sets it when asked to reseed the box.
	var caps uint64
	if _, err := fmt.Sscanf(e.sh(t, b.ID, "grep CapEff /proc/self/status"), "CapEff:\t%x", &caps); err != nil ||
		caps&(1<<unix.CAP_SYS_ADMIN) != 0 || caps&(1<<unix.CAP_CHOWN) == 0 {
		t.Fatalf("root's capabilities in the box: %x, %v; want CAP_CHOWN and not CAP_SYS_ADMIN", caps, err)
	}
	if got := e.sh(t, b.ID, "hostname other 2>/dev/null && echo renamed; hostname"); got != "box\n" {
		t.Fatalf("root set the hostname: %q", got)
	}
	// Nor have the relays the engine starts with runsc exec (one carries these commands).
	relays := e.sh(t, b.ID, `for p in /proc/[0-9]*; do if tr '\0' ' ' <$p/cmdline 2>/dev/null | grep -q '^/usr/local/sbin/cocoonbox-init relay'; then grep CapEff $p/status; fi; done`)
	if relays == "" {
		t.Fatal("no relay process in the box")
	}
	for line := range strings.Lines(relays) {
		var relay uint64
		if _, err := fmt.Sscanf(line, "CapEff:\t%x", &relay); err != nil || relay&(1<<unix.CAP_SYS_ADMIN) != 0 {
			t.Fatalf("a relay's capabilities: %q, %v; want no CAP_SYS_ADMIN", line, err)
		}
	}
	if _, errOut, code, err := e.exec(b.ID, boxproto.InitPath, "reseed", "renamed-box"); err != nil || code != 0 {
		t.Fatalf("reseed: exit %d, %v: %s", code, err, errOut)
	}
	if got := e.sh(t, b.ID, "hostname; cat /etc/hostname"); got != "renamed-box\nrenamed-box\n" {
		t.Fatalf("hostname after the reseed: %q", got)
	}

	// A file written in the box lands in its disk on the host.
	e.sh(t, b.ID, "echo on-disk > /root/file")
	if got, err := os.ReadFile(filepath.Join(diskPath(b.Dir), "root", "file")); err != nil || string(got) != "on-disk\n" {
		t.Fatalf("disk: %q, %v", got, err)
	}
}

func TestGVisorExecCancelKillsChild(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := e.rt.Exec(ctx, b.ID, ExecRequest{Argv: []string{"sh", "-c", "sleep 1000 & exec sleep 999"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled exec: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("cancelled exec returned after %v", d)
	}
	testutil.Eventually(t, testutil.WaitShort, "the cancelled command's process group to die", func() bool {
		out, _, _, _ := e.exec(b.ID, "ps", "-eo", "args")
		return !strings.Contains(out, "sleep 99")
	})
}

func TestGVisorRelayHalfCloseSurvivesHibernate(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	e.startServers(t, b.ID)
	e.checkHalfClose(t, b.ID)
	e.checkPortClosed(t, b.ID)

	// An open relay holds a host socket in the box: hibernate must refuse, changing nothing.
	c := e.dial(t, b.ID, echoPort)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Hibernate(ctx, b.ID); err == nil || !strings.Contains(err.Error(), "still open") {
		t.Fatalf("hibernate with an open relay: %v", err)
	}
	if st, _ := e.rt.State(ctx, b.ID, b.Dir); st != StateRunning {
		t.Fatalf("after a refused hibernate: %s", st)
	}
	_ = c.Close()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Dial(ctx, b.ID, echoPort); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("dial a hibernated box: %v, want ErrNotRunning", err)
	}
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	// The servers were children of the init: they were restored with the box.
	e.checkHalfClose(t, b.ID)

	// Throughput, box → engine.
	c = e.dial(t, b.ID, zeroPort)
	_ = c.CloseWrite()
	t0 := time.Now()
	n, err := io.Copy(io.Discard, c)
	_ = c.Close()
	if err != nil || n != 64<<20 {
		t.Fatalf("relay throughput: read %d bytes, %v", n, err)
	}
	t.Logf("relay throughput: %.0f MB/s", float64(n)/1e6/time.Since(t0).Seconds())
}

func TestGVisorHibernateWakeKeepsMemoryAndDisk(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A counter held in a shell variable: only a memory image can bring its value back.
	e.sh(t, b.ID, `setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.02; done' </dev/null >/dev/null 2>&1 & echo $! > /tmp/counter.pid`)
	pid := strings.TrimSpace(e.sh(t, b.ID, "cat /tmp/counter.pid"))
	testutil.Eventually(t, testutil.WaitShort, "the counter to count", func() bool { return counter(e, b.ID) > 3 })
	idle, _ := e.rt.Stats(ctx, b.ID)
	t.Logf("memory of a running box: %d MiB", idle.MemUsedBytes>>20)

	var ckpt, restore, firstExec time.Duration
	const cycles = 20
	for i := 0; i < cycles; i++ {
		e.sh(t, b.ID, "echo cycle-"+strconv.Itoa(i)+" > /root/cycle-"+strconv.Itoa(i))
		before := counter(e, b.ID)
		t0 := time.Now()
		if err := e.rt.Hibernate(ctx, b.ID); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		ckpt += time.Since(t0)
		if st, err := e.rt.State(ctx, b.ID, b.Dir); err != nil || st != StateHibernated {
			t.Fatalf("cycle %d: state %s, %v", i, st, err)
		}
		if err := e.rt.Hibernate(ctx, b.ID); err != nil {
			t.Fatalf("cycle %d: hibernate a hibernated box: %v", i, err)
		}
		if s, err := e.rt.Stats(ctx, b.ID); err != nil || s.MemUsedBytes != 0 {
			t.Fatalf("cycle %d: a hibernated box uses %d bytes, %v", i, s.MemUsedBytes, err)
		}
		if mounted(filepath.Join(b.Dir, rootfsDir)) {
			t.Fatalf("cycle %d: a hibernated box keeps its root mounted", i)
		}
		t0 = time.Now()
		if err := e.rt.Wake(ctx, b.ID); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		restore += time.Since(t0)
		after := counter(e, b.ID)
		firstExec += time.Since(t0)
		if err := e.rt.Wake(ctx, b.ID); err != nil {
			t.Fatalf("cycle %d: wake a running box: %v", i, err)
		}
		// Restored, not restarted: the same process, counting on from where it was.
		if after < before || after > before+200 {
			t.Fatalf("cycle %d: counter %d before hibernate, %d after wake", i, before, after)
		}
		want := "alive " + pid + "\n"
		for j := 0; j <= i; j++ {
			want += "cycle-" + strconv.Itoa(j) + "\n"
		}
		got := e.sh(t, b.ID, "kill -0 $(cat /tmp/counter.pid) && echo alive $(cat /tmp/counter.pid); "+
			"for j in $(seq 0 "+strconv.Itoa(i)+"); do cat /root/cycle-$j; done")
		if got != want {
			t.Fatalf("cycle %d: the box holds %q, want %q", i, got, want)
		}
	}
	last := counter(e, b.ID)
	testutil.Eventually(t, testutil.WaitShort, "the counter to go on counting", func() bool { return counter(e, b.ID) > last })
	t.Logf("over %d cycles: checkpoint %v, restore %v, wake to first exec %v",
		cycles, ckpt/cycles, restore/cycles, firstExec/cycles)
}

// counter reads the value the box's counter last wrote, retrying a read that caught the file
// between its truncation and its write.
func counter(e *testEnv, id string) int {
	for i := 0; i < 10; i++ {
		out, _, _, _ := e.exec(id, "cat", "/tmp/count")
		if n, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
			return n
		}
	}
	return -1
}

func TestGVisorSnapshotSeedsNewBox(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	e.sh(t, b.ID, "mkdir -p /srv/data && echo kept > /srv/data/file && rm /etc/hostname")
	dst := filepath.Join(shortTempDir(t), "ck")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Snapshot(ctx, b.ID, dst); err != nil {
		t.Fatal(err)
	}
	e.sh(t, b.ID, "echo later > /srv/data/later") // the snapshot is a copy, not a view

	// A claim from the checkpoint: a new box whose Dir starts as a copy of dst.
	nb := e.spec()
	if err := e.rt.Seed(ctx, nb, dst); err != nil {
		t.Fatal(err)
	}
	e.start(t, nb)
	if got := e.sh(t, nb.ID, "cat /srv/data/file; ls /srv/data; test -e /etc/hostname || echo deleted"); got != "kept\nfile\ndeleted\n" {
		t.Fatalf("new box sees %q", got)
	}
}

func TestGVisorReadoptAfterRestart(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	run := e.start(t, e.spec())
	hib := e.start(t, e.spec())
	stop := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	for _, b := range []Spec{run, hib, stop} {
		e.sh(t, b.ID, "echo "+b.ID+" > /root/id")
	}
	if err := e.rt.Hibernate(ctx, hib.ID); err != nil {
		t.Fatal(err)
	}
	// As after a host reboot: the hibernated box's overlay is gone; Wake mounts it again.
	if err := unmountOverlay(hib.Dir); err != nil {
		t.Fatal(err)
	}
	// As after an engine killed in the middle of a wake: the image was already set aside.
	ckpt := filepath.Join(hib.Dir, checkpointDir)
	if err := os.Rename(ckpt, ckpt+".restoring"); err != nil {
		t.Fatal(err)
	}
	// As after an engine killed just after a wake, before it removed the used image.
	if err := os.Mkdir(filepath.Join(run.Dir, checkpointDir+".restoring"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A crash of the box (or a host reboot) leaves only its disk.
	if err := e.rt.(*gvisor).deleteSandbox(ctx, stop.ID); err != nil {
		t.Fatal(err)
	}

	// A new engine: a new runtime on the same data dir knows nothing but what is on disk.
	rt, err := New(NameGVisor, Options{DataDir: e.data})
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	for b, want := range map[*Spec]State{&run: StateRunning, &hib: StateHibernated, &stop: StateStopped} {
		if st, err := rt.State(ctx, b.ID, b.Dir); err != nil || st != want {
			t.Fatalf("%s: state %s, %v; want %s", b.ID, st, err, want)
		}
	}
	if exists(filepath.Join(run.Dir, checkpointDir+".restoring")) {
		t.Fatal("a used memory image is left beside a running box")
	}
	if st, _ := rt.State(ctx, "sb_gone", filepath.Join(e.boxes, "sb_gone")); st != StateMissing {
		t.Fatalf("unknown box: %s", st)
	}
	if err := rt.Wake(ctx, stop.ID); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("wake a stopped box: %v, want ErrNotRunning", err)
	}
	if err := rt.Start(ctx, stop); err != nil {
		t.Fatal(err)
	}
	if err := rt.Wake(ctx, hib.ID); err != nil {
		t.Fatal(err)
	}
	for _, b := range []Spec{run, hib, stop} {
		if got := strings.TrimSpace(e.sh(t, b.ID, "cat /root/id")); got != b.ID {
			t.Fatalf("%s: /root/id holds %q", b.ID, got)
		}
	}
	// Destroy by id alone, as the engine does for a directory it has no record of.
	if err := destroyFresh(ctx, e.data, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(run.Dir); !os.IsNotExist(err) {
		t.Fatalf("destroyed box dir: %v", err)
	}
}

// destroyFresh destroys a box through yet another fresh runtime that was never told its dir.
func destroyFresh(ctx context.Context, data, id string) error {
	rt, err := New(NameGVisor, Options{DataDir: data})
	if err != nil {
		return err
	}
	return rt.Destroy(ctx, id)
}
