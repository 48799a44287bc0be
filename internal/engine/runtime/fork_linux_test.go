package runtime

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestGVisorForkGoesOnFromTheCopy: boxes restored from a memory snapshot of a running box, and of
// a hibernated one, have its processes at the moment of the copy and a disk of their own.
func TestGVisorForkGoesOnFromTheCopy(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	f := e.rt.(Forker)
	src := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	e.sh(t, src.ID, `setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.02; done' </dev/null >/dev/null 2>&1 & echo $! > /tmp/counter.pid`)
	pid := strings.TrimSpace(e.sh(t, src.ID, "cat /tmp/counter.pid"))
	testutil.Eventually(t, testutil.WaitShort, "the counter to count", func() bool { return counter(e, src.ID) > 3 })

	fork := func(name string, before int) Spec {
		t.Helper()
		dst := filepath.Join(shortTempDir(t), "ck")
		if err := f.SnapshotMemory(ctx, src.ID, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nb := e.spec()
		if err := e.rt.Seed(ctx, nb, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { _ = e.rt.Destroy(context.Background(), nb.ID) })
		if err := f.Restore(ctx, nb, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The same process, counting on from the copy.
		if got := e.sh(t, nb.ID, "kill -0 $(cat /tmp/counter.pid) && cat /tmp/counter.pid"); strings.TrimSpace(got) != pid {
			t.Fatalf("%s: the fork's counter is %q, want pid %s", name, got, pid)
		}
		at := counter(e, nb.ID)
		if at < before {
			t.Fatalf("%s: the fork counts from %d, below the %d before the copy", name, at, before)
		}
		testutil.Eventually(t, testutil.WaitShort, name+" counter to go on", func() bool { return counter(e, nb.ID) > at })
		return nb
	}
	a := fork("fork of a running box", counter(e, src.ID))
	b := fork("second fork", counter(e, src.ID))
	testutil.Eventually(t, testutil.WaitShort, "the source to go on counting", func() bool { return counter(e, src.ID) > 0 })

	e.sh(t, a.ID, "echo mine > /root/only-a")
	for _, id := range []string{src.ID, b.ID} {
		if got := e.sh(t, id, "test -e /root/only-a && echo seen || echo absent"); got != "absent\n" {
			t.Fatalf("a file written in one fork is %s in %s", got, id)
		}
	}

	asleep := counter(e, src.ID)
	if err := e.rt.Hibernate(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	c := fork("fork of a hibernated box", asleep)
	if err := e.rt.Wake(ctx, src.ID); err != nil {
		t.Fatalf("wake the source after a fork of it: %v", err)
	}
	testutil.Eventually(t, testutil.WaitShort, "the woken source to count", func() bool { return counter(e, src.ID) > 0 })
	if err := e.rt.Destroy(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	last := counter(e, c.ID)
	testutil.Eventually(t, testutil.WaitShort, "a fork to go on once its source is gone", func() bool { return counter(e, c.ID) > last })
}
