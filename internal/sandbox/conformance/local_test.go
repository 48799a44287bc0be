package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/conformance"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// engineArg makes the test binary serve a local engine (see TestMain), so the restart check can
// SIGKILL a real engine process and start another on the same data.
const engineArg = "__conformance-engine"

// childEngine is what the parent hands the child engine on stdin.
type childEngine struct {
	Dir, Addr, RootToken, Tenant string
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == engineArg {
		if err := serveChildEngine(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "engine:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveChildEngine serves until its stdin closes (the test ended or died) or it is killed.
func serveChildEngine(in io.Reader) error {
	br := bufio.NewReader(in)
	var c childEngine
	if err := json.NewDecoder(br).Decode(&c); err != nil {
		return err
	}
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(c.Dir, "runtime")})
	if err != nil {
		return err
	}
	e, err := engine.New(engine.Options{
		Dir: c.Dir, Runtime: rt, Images: images.Resolver(""), RootToken: c.RootToken,
		TenantTokens: []string{c.Tenant}, OwnerAddr: c.Addr,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, br); cancel() }()
	fmt.Println("ready")
	err = e.Serve(ctx, ln)
	_ = e.Close()
	return err
}

// TestLocalEngine runs the conformance suite against the local engine with the gVisor runtime
// and the base image, as `make test` provides them; the restart check SIGKILLs the engine.
func TestLocalEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real gVisor boxes")
	}
	dir, err := os.MkdirTemp("", "cbconf-") // short: runsc's unix socket paths must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	const root, tenant = "conformance-root-token", "conformance-tenant-token"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	child := childEngine{Dir: dir, Addr: addr, RootToken: root, Tenant: tenant}

	var cmd *exec.Cmd
	var stdin io.WriteCloser
	start := func(t *testing.T) {
		t.Helper()
		cmd = exec.Command(os.Args[0], engineArg)
		cmd.Stderr = os.Stderr
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(stdin).Encode(child); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("engine did not start (said %q)", line)
		}
	}
	kill := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	start(t)
	t.Cleanup(func() {
		kill()
		cleanupBoxes(t, dir)
	})

	hc := &http.Client{Timeout: 2 * time.Minute}
	url := "http://" + addr
	conformance.Run(t, conformance.Harness{
		Root:       sandbox.NewHTTP(url, root, hc),
		Tenant:     sandbox.NewHTTP(url, tenant, hc),
		WithToken:  func(token string) sandbox.Client { return sandbox.NewHTTP(url, token, hc) },
		URL:        url,
		RootToken:  root,
		HTTPClient: hc,
		Template:   "base",
		Size:       sandbox.SizeSmall,
		RestartEngine: func(t *testing.T) {
			kill() // as SIGKILL: no Close, boxes keep running
			start(t)
		},
	})
	t.Run("DiskExport", func(t *testing.T) { testDiskExport(t, sandbox.NewHTTP(url, root, hc)) })
}

// testDiskExport checks the local engine's extension: a checkpoint's disk (the box's overlay
// upper layer) streams out in the snapshot format, with a deleted image file as a whiteout.
func testDiskExport(t *testing.T, c *sandbox.HTTP) {
	ctx := context.Background()
	sb, err := c.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: "disk-export"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Release(ctx, sb.SandboxRef) }()
	res, err := c.Exec(ctx, sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo exported > /root/notes && rm /etc/issue"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("prepare the box: %+v, %v", res, err)
	}
	ck, err := c.Checkpoint(ctx, sb.SandboxRef, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.DeleteCheckpoint(ctx, ck.ID) }()
	var stream bytes.Buffer
	got, err := c.ExportCheckpointDisk(ctx, ck.ID, nil, &stream)
	if err != nil {
		t.Fatal(err)
	}
	copied := bytes.Clone(stream.Bytes())
	root := filepath.Join(t.TempDir(), "disk")
	if _, err := snapshot.Import(ctx, &stream, root, snapshot.Manifest{SHA256: got.SHA256, Bytes: got.Bytes}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "root", "notes")); err != nil || string(data) != "exported\n" {
		t.Fatalf("/root/notes in the exported disk: %q, %v", data, err)
	}
	fi, err := os.Lstat(filepath.Join(root, "etc", "issue"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("deleted /etc/issue is not a whiteout in the exported disk: %v, %v", fi, err)
	}

	// Imported back as a checkpoint, the stream gives a new box the same disk.
	imported, err := c.ImportCheckpointDisk(ctx, bytes.NewReader(copied), []sandbox.DiskExport{got},
		sandbox.PoolKey{Template: "base", Net: sandbox.NetNone, Size: sandbox.SizeSmall}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.DeleteCheckpoint(ctx, imported.ID) }()
	box, err := c.ClaimFromCheckpoint(ctx, imported.ID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Release(ctx, box.SandboxRef) }()
	res, err = c.Exec(ctx, box.SandboxRef, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /root/notes; test -e /etc/issue && echo issue-back"}})
	if err != nil || res.Stdout != "exported\n" {
		t.Fatalf("box from the imported disk: %+v, %v", res, err)
	}
}

// cleanupBoxes destroys whatever boxes a failed run left, so no sandbox or mount outlives the test.
func cleanupBoxes(t *testing.T, dir string) {
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(dir, "runtime")})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "boxes"))
	for _, e := range entries {
		if err := rt.Destroy(context.Background(), e.Name()); err != nil {
			t.Errorf("cleanup %s: %v", e.Name(), err)
		}
	}
	if c, ok := rt.(io.Closer); ok {
		_ = c.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}
