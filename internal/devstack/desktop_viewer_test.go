package devstack_test

import (
	"bufio"
	"bytes"
	"crypto/des"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/bits"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestDesktopNativeViewer: `cocoonbox desktop BOX --listen` with a stock VNC viewer
// (xtightvncviewer, under an Xvfb of the test's own). The viewer logs in with the one-time
// password the command printed and shows the box's XFCE desktop, which the test screenshots;
// a viewer with a wrong password is refused with the reason, and the tunnel still serves the
// next viewer with the right one.
func TestDesktopNativeViewer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	for _, bin := range []string{"Xvfb", "xtightvncviewer"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: run make deps", bin)
		}
	}
	cli := buildCLI(t)
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 5*time.Minute)
	tun := startDesktopTunnel(t, cli, e)
	display, fb := startXvfb(t, 1400, 900)

	// The right password: the viewer's window (wherever on the black root it went) shows the
	// whole 1280x800 desktop, lit and in more than a few colours, and settled (the same for the
	// last second), so the screenshot is of the desktop.
	right := startViewer(t, display, tun.addr, tun.password)
	var shot *image.RGBA
	var last string
	same := 0
	if err := testutil.Poll(e.ctx, time.Minute, func() error {
		img, err := readXWD(fb)
		if err != nil {
			return err
		}
		window := litBounds(img)
		st := screenStats(img, window)
		if window.Dx() != 1280 || window.Dy() != 800 || st.lit < 0.5 || st.colors < 8 {
			same = 0
			return fmt.Errorf("viewer window %v: %s; want 1280x800, at least half lit, 8 colours (viewer said %q)", window, st, right.output())
		}
		if same++; st.String() != last {
			same, last = 0, st.String()
		}
		if same < 10 {
			return fmt.Errorf("viewer window %+v, still changing", st)
		}
		shot = img
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("viewer window %v: %s", litBounds(shot), last)
	dir := artifactDir(t)
	f, err := os.Create(filepath.Join(dir, "viewer.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, shot); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (viewer.png: the Xvfb screen with xtightvncviewer on it)", dir)
	right.stop()

	// A wrong password: the viewer is refused with the reason and gives up by itself.
	wrong := startViewer(t, display, tun.addr, "WRONGPW2")
	if exited, err := wrong.wait(testutil.WaitShort); !exited || !strings.Contains(wrong.output(), "wrong password") {
		t.Errorf("a viewer with a wrong password: exited %v (%v), said %q", exited, err, wrong.output())
	}
	testutil.Eventually(t, testutil.WaitShort, "the tunnel to note the wrong password", func() bool {
		return strings.Contains(tun.stderr.String(), "wrong VNC password (1 of 5)")
	})

	// The next viewer with the right password gets a whole frame of the desktop.
	conn, err := net.DialTimeout("tcp", tun.addr, testutil.WaitShort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, err := rfbHandshakeAuth(conn, tun.password)
	if err != nil {
		t.Fatalf("the right password after a wrong one: %v", err)
	}
	if c.width != 1280 || c.height != 800 {
		t.Errorf("desktop %dx%d, want 1280x800", c.width, c.height)
	}
	if _, err := c.frame(); err != nil {
		t.Fatalf("a frame after a wrong password: %v", err)
	}
}

// desktopTunnel is a running `cocoonbox desktop BOX --listen 127.0.0.1:0`.
type desktopTunnel struct {
	cmd            *exec.Cmd
	addr, password string
	stderr         *syncBuffer // all the command wrote there
}

// startDesktopTunnel runs the CLI at bin against e's box, with args besides, and returns once it
// printed where it listens and the password; the test's cleanup interrupts it.
func startDesktopTunnel(t *testing.T, bin string, e *desktopEnv, args ...string) *desktopTunnel {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"desktop", "--listen", "127.0.0.1:0", string(e.id)}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CONFIG_HOME=", "COCOONBOX_OUTPUT=",
		"COCOONBOX_ENDPOINT="+e.d.URLs().API, "COCOONBOX_TOKEN="+e.token)
	tun := &desktopTunnel{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = tun.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
	addrRE := regexp.MustCompile(` to (127\.0\.0\.1:\d+); point a VNC viewer there`)
	passwordRE := regexp.MustCompile(`(?m)^VNC password: (\S+) \(valid while this command runs\)$`)
	said := ""
	testutil.Eventually(t, testutil.WaitShort, "cocoonbox desktop to print its address and password", func() bool {
		said = tun.stderr.String()
		addr, password := addrRE.FindStringSubmatch(said), passwordRE.FindStringSubmatch(said)
		if addr == nil || password == nil {
			return false
		}
		tun.addr, tun.password = addr[1], password[1]
		return true
	}, &said)
	t.Cleanup(func() { t.Logf("cocoonbox desktop said:\n%s", tun.stderr) })
	return tun
}

// startXvfb starts an X server on a display it chooses itself, with a black root window and
// its screen kept as an XWD file, and returns the display and that file; the test's cleanup
// stops it.
func startXvfb(t *testing.T, width, height int) (display, fb string) {
	t.Helper()
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", fmt.Sprintf("%dx%dx24", width, height),
		// -noreset: by default the server resets when its last client leaves, and a viewer
		// connecting in that moment is told "Can't open display" (seen after the first viewer stops).
		"-fbdir", dir, "-nolisten", "tcp", "-br", "-noreset")
	cmd.ExtraFiles = []*os.File{w}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	t.Cleanup(func() { stopProcess(cmd) })
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case n := <-got:
		if _, err := strconv.Atoi(n); err != nil {
			t.Fatalf("Xvfb gave display %q: %s", n, out)
		}
		return ":" + n, filepath.Join(dir, "Xvfb_screen0")
	case <-time.After(testutil.WaitShort):
		t.Fatalf("Xvfb did not start: %s", out)
		return "", ""
	}
}

// viewer is a running xtightvncviewer.
type viewer struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// startViewer runs xtightvncviewer on display against addr with password in its password
// file; the test's cleanup stops it.
func startViewer(t *testing.T, display, addr, password string) *viewer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(file, vncPasswdFile(password), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("xtightvncviewer", "-passwd", file, host+"::"+port)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	v := &viewer{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = v.out, v.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.done <- cmd.Wait() }()
	t.Cleanup(v.stop)
	return v
}

// wait waits within for the viewer to exit, and returns whether it did and how.
func (v *viewer) wait(within time.Duration) (exited bool, err error) {
	select {
	case err := <-v.done:
		v.done <- err
		return true, err
	case <-time.After(within):
		return false, nil
	}
}

// stop ends the viewer if it still runs: SIGTERM, then SIGKILL after WaitShort.
func (v *viewer) stop() {
	if exited, _ := v.wait(0); exited {
		return
	}
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	if exited, _ := v.wait(testutil.WaitShort); !exited {
		_ = v.cmd.Process.Kill()
		v.wait(testutil.WaitShort)
	}
}

func (v *viewer) output() string { return v.out.String() }

// stopProcess interrupts a child the test started, and kills it if it has not exited within
// WaitShort.
func stopProcess(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testutil.WaitShort):
		_ = cmd.Process.Kill()
		<-done
	}
}

// vncDES encrypts data (8-byte blocks) with DES keyed by key as VNC does: zero-padded to 8
// bytes, each byte's bits reversed. With the password as key it answers a VNC challenge.
func vncDES(key string, data []byte) []byte {
	k := make([]byte, 8)
	copy(k, key)
	for i := range k {
		k[i] = bits.Reverse8(k[i])
	}
	c, err := des.NewCipher(k)
	if err != nil {
		panic(err)
	}
	out := make([]byte, len(data))
	for i := 0; i+8 <= len(data); i += 8 {
		c.Encrypt(out[i:i+8], data[i:i+8])
	}
	return out
}

// vncPasswdFile is password as vncpasswd stores it: DES-encrypted with VNC's fixed key.
func vncPasswdFile(password string) []byte {
	pw := make([]byte, 8)
	copy(pw, password)
	return vncDES(string([]byte{23, 82, 107, 6, 35, 78, 88, 7}), pw)
}

// syncBuffer is a bytes.Buffer that a child's output goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// readXWD reads an XWD file of a 24- or 32-bit true-colour ZPixmap, as Xvfb's -fbdir keeps its
// screen, into an image.
func readXWD(path string) (*image.RGBA, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 100 {
		return nil, fmt.Errorf("xwd: %d bytes, shorter than its header", len(b))
	}
	h := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	headerSize, format, width, height := h(0), h(2), int(h(4)), int(h(5))
	byteOrder, bpp, stride := h(7), h(11), int(h(12))
	rMask, gMask, bMask, ncolors := h(14), h(15), h(16), h(19)
	if format != 2 || bpp != 32 {
		return nil, fmt.Errorf("xwd: pixmap format %d, %d bits per pixel; want ZPixmap, 32", format, bpp)
	}
	data := int(headerSize) + 12*int(ncolors)
	if len(b) < data+stride*height {
		return nil, fmt.Errorf("xwd: %d bytes, want %d", len(b), data+stride*height)
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if byteOrder == 1 {
		order = binary.BigEndian
	}
	channel := func(p, mask uint32) uint8 {
		return uint8((p & mask) >> bits.TrailingZeros32(mask))
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		row := b[data+y*stride:]
		for x := range width {
			p := order.Uint32(row[4*x:])
			img.SetRGBA(x, y, color.RGBA{channel(p, rMask), channel(p, gMask), channel(p, bMask), 0xff})
		}
	}
	return img, nil
}

// screen is what the desktop checks look at in a screenshot.
type screen struct {
	lit    float64 // the share of pixels that are not black
	colors int     // distinct colours
	sum    uint64  // a checksum of the pixels, to tell a settled screen from a changing one
}

func (s screen) String() string {
	return fmt.Sprintf("%.0f%% lit, %d colours, sum %x", 100*s.lit, s.colors, s.sum)
}

// litBounds is the smallest rectangle of img holding every pixel that is not black.
func litBounds(img *image.RGBA) image.Rectangle {
	var r image.Rectangle
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if c := img.RGBAAt(x, y); c.R|c.G|c.B != 0 {
				r = r.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return r
}

// screenStats measures r of img.
func screenStats(img *image.RGBA, r image.Rectangle) screen {
	colors := map[color.RGBA]bool{}
	lit, n := 0, 0
	var sum uint64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := img.RGBAAt(x, y)
			n++
			if c.R|c.G|c.B != 0 {
				lit++
			}
			colors[c] = true
			sum = sum*31 + (uint64(c.R)<<16 | uint64(c.G)<<8 | uint64(c.B))
		}
	}
	return screen{lit: float64(lit) / float64(n), colors: len(colors), sum: sum}
}
