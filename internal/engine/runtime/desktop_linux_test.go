package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// The desktop image's display, as image/desktop/desktop.sh starts it.
const (
	vncPort       = 5900
	desktopWidth  = 1280
	desktopHeight = 800
)

// TestGVisorDesktopSurvivesHibernate boots a box from the desktop image, whose boot hook starts
// Xvnc and an XFCE session, reaches the VNC server through the ports relay, and checks that the
// same desktop answers after hibernate and wake. Like every runtime test it fails, never skips,
// when the image is not built.
func TestGVisorDesktopSurvivesHibernate(t *testing.T) {
	t0 := time.Now()
	e, b := startDesktopBox(t)

	checkRFB(t, e, b.ID)
	t.Logf("boot to an RFB answer: %v", time.Since(t0))
	var procs string
	testutil.Eventually(t, testutil.WaitLong, "the XFCE session and its window manager", func() bool {
		var ok bool
		procs, ok = desktopProcs(e, b.ID)
		return ok
	}, &procs)
	t.Logf("boot to a running session: %v", time.Since(t0))
	if got := e.sh(t, b.ID, "setpriv --reuid=user --regid=user --init-groups env DISPLAY=:0 xdotool getdisplaygeometry"); strings.TrimSpace(got) != "1280 800" {
		t.Fatalf("xdotool getdisplaygeometry: %q", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	t1 := time.Now()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("hibernate %v, wake %v", t2.Sub(t1), time.Since(t2))

	// The same processes, not new ones: the desktop was restored, not started again.
	if got, _ := desktopProcs(e, b.ID); got != procs {
		t.Fatalf("desktop processes after wake:\n%s\nbefore:\n%s", got, procs)
	}
	checkRFB(t, e, b.ID)
}

// desktopProcs names the PID of each of the desktop's long-lived processes (the oldest of each
// name: a starting session forks short-lived children under its own name), and says whether all
// of them run.
func desktopProcs(e *testEnv, id string) (string, bool) {
	out, _, _, _ := e.exec(id, "sh", "-c",
		`for n in Xvnc xfce4-session xfwm4; do echo "$n $(pgrep -u user -o -x $n)"; done`)
	procs := strings.TrimSpace(out)
	for _, line := range strings.Split(procs, "\n") {
		if len(strings.Fields(line)) != 2 {
			return procs, false
		}
	}
	return procs, procs != ""
}

// checkRFB dials the box's VNC server through the relay, waiting while it is still starting, and
// goes through the RFB 3.8 handshake up to the server's description of its framebuffer: version,
// security type None (no password), and the desktop's size.
func checkRFB(t *testing.T, e *testEnv, id string) {
	t.Helper()
	var c HalfCloser
	var last string
	testutil.Eventually(t, testutil.WaitLong, "Xvnc to listen on port 5900", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
		defer cancel()
		var err error
		c, err = e.rt.Dial(ctx, id, vncPort)
		if err != nil {
			last = err.Error()
			if !errors.Is(err, ErrPortClosed) {
				t.Fatalf("dial %d: %v", vncPort, err)
			}
		}
		return err == nil
	}, &last)
	defer func() { _ = c.Close() }() // an open relay would keep the box from hibernating
	_ = c.SetDeadline(time.Now().Add(testutil.WaitShort))

	read := func(what string, n int) []byte {
		t.Helper()
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("read %s: %v", what, err)
		}
		return buf
	}
	write := func(what string, p []byte) {
		t.Helper()
		if _, err := c.Write(p); err != nil {
			t.Fatalf("write %s: %v", what, err)
		}
	}
	if v := read("version", 12); string(v) != "RFB 003.008\n" {
		t.Fatalf("banner %q, want RFB 003.008", v)
	}
	write("version", []byte("RFB 003.008\n"))
	n := read("security type count", 1)[0]
	if n == 0 {
		t.Fatal("the server refused the connection")
	}
	const securityNone = 1
	if types := read("security types", int(n)); !bytes.Contains(types, []byte{securityNone}) {
		t.Fatalf("security types %v do not offer None", types)
	}
	write("security type", []byte{securityNone})
	if res := read("security result", 4); binary.BigEndian.Uint32(res) != 0 {
		t.Fatalf("security result %v", res)
	}
	write("client init", []byte{1}) // shared: other viewers stay connected
	init := read("server init", 4)
	w, h := binary.BigEndian.Uint16(init[0:2]), binary.BigEndian.Uint16(init[2:4])
	if w != desktopWidth || h != desktopHeight {
		t.Fatalf("framebuffer %dx%d, want %dx%d", w, h, desktopWidth, desktopHeight)
	}
}

// startDesktopBox starts a box from the desktop image (2 vCPUs, 2 GiB, as XFCE wants) and logs
// its console if the test fails. Like every runtime test it fails, never skips, when the image
// is not built.
func startDesktopBox(t *testing.T) (*testEnv, Spec) {
	t.Helper()
	e := newTestEnv(t, NameGVisor)
	cache, _ := config.Env()("COCOONBOX_IMAGE_CACHE")
	rootfs, err := images.Resolve(cache, "desktop")
	if err != nil {
		t.Fatal(err)
	}
	e.rootfs = rootfs
	spec := e.spec()
	spec.VCPUs, spec.MemoryMB = 2, 2048
	b := e.start(t, spec)
	t.Cleanup(func() { // before the box and its console go
		if t.Failed() {
			t.Logf("console:\n%s", readFrom(filepath.Join(b.Dir, consoleFile), 0))
		}
	})
	return e, b
}
