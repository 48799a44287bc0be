package boxlink

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestError: the agent's answers and the relay's refusals reach callers with the domain code
// they can act on, and the agent's message (cleaned) where it names a field.
func TestError(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		in   error
		code string
		msg  string
	}{
		{status.Error(grpccodes.InvalidArgument, "x: 5000 is off the 1280x800 screen"), cocoonbox.EInvalid, "x: 5000 is off the 1280x800 screen"},
		{status.Error(grpccodes.Unavailable, "connection refused"), cocoonbox.EUnavailable, "not answering"},
		{status.Error(grpccodes.Unauthenticated, "no credential yet"), cocoonbox.EUnavailable, "credential"},
		{status.Error(grpccodes.FailedPrecondition, "no display"), cocoonbox.EConflict, "no display"},
		{status.Error(grpccodes.Unimplemented, "unknown service"), cocoonbox.EUnimplemented, "lacks this"},
		{fmt.Errorf("dial agent: %w", &sandbox.Error{Op: "relay", Status: 502, Message: "nothing listens on 7070", Kind: sandbox.ErrUnavailable}), cocoonbox.EUnavailable, "agent is not answering"},
		{fmt.Errorf("dial agent: %w", &sandbox.Error{Op: "relay", Status: 404, Kind: sandbox.ErrNotFound}), cocoonbox.EUnavailable, "sandbox is gone"},
		{fmt.Errorf("dial agent: %w", &sandbox.Error{Op: "relay", Status: 429, Kind: sandbox.ErrNoCapacity}), cocoonbox.EUnavailable, "busy"},
		{status.Error(grpccodes.NotFound, "no run run_1"), cocoonbox.ENotFound, "no run run_1"},
		{status.Error(grpccodes.PermissionDenied, "state import refused"), cocoonbox.EInvalid, "refused"},
		{status.Error(grpccodes.InvalidArgument, "bad\x1b[31m\xffinput"), cocoonbox.EInvalid, "bad [31m input"},
		{status.Error(grpccodes.Internal, "boom"), cocoonbox.EInternal, ""},
		{cocoonbox.Errorf(cocoonbox.EConflict, "already a domain error"), cocoonbox.EConflict, "already a domain error"},
	}
	for _, tc := range cases {
		got := Error(ctx, tc.in)
		if cocoonbox.ErrorCode(got) != tc.code || !strings.Contains(cocoonbox.ErrorMessage(got), tc.msg) {
			t.Errorf("Error(%v) = %v (code %s), want code %s with %q", tc.in, got, cocoonbox.ErrorCode(got), tc.code, tc.msg)
		}
	}
	if Error(ctx, nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

// TestErrorKeepsCancellation: a call cut short by its caller is the caller's cancellation, not
// an agent error.
func TestErrorKeepsCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Error(ctx, status.Error(grpccodes.Canceled, "x")); err != context.Canceled {
		t.Fatalf("Error on a cancelled context = %v", err)
	}
}

// TestVersionAtLeast: only a well-formed version at or above the minimum passes.
func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"0.8.0": true, "0.10.0": true, "1.0.0": true, "0.7.9": false, "0.8": false, "x.y.z": false, "": false, "0.8.-1": false} {
		if got := versionAtLeast(v, MinAgentVersion); got != want {
			t.Errorf("versionAtLeast(%q, %s) = %v, want %v", v, MinAgentVersion, got, want)
		}
	}
}

// TestCredential: a box's credential is 64 hex digits, the same for the same key and box, and
// another for another key or box.
func TestCredential(t *testing.T) {
	const box = cocoonbox.BoxID("bx_0123456789abcdef")
	a := Credential([]byte("k1"), box)
	if len(a) != 64 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("credential %q is not 64 hex digits", a)
	}
	if Credential([]byte("k1"), box) != a {
		t.Fatal("not deterministic")
	}
	if Credential([]byte("k2"), box) == a || Credential([]byte("k1"), "bx_fedcba9876543210") == a {
		t.Fatal("same credential under another key or box")
	}
}

// TestTheBuiltAgentIsCurrent: the agent built from this tree into images is one agent runs take.
func TestTheBuiltAgentIsCurrent(t *testing.T) {
	if !versionAtLeast(agentvm.Version, MinAgentVersion) {
		t.Fatalf("agentvm.Version %s is older than MinAgentVersion %s", agentvm.Version, MinAgentVersion)
	}
}

// TestCredentialScript runs the credential's shell script with the host's sh, on a path of the
// test's: a missing directory and file are made (the file 0600), a file that holds the credential
// is left as it is, and another credential replaces it whole.
func TestCredentialScript(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "cocoonbox", "agent-credential")
	run := func(cred string) {
		t.Helper()
		runCredentialScript(t, path, os.Getenv("PATH"), cred)
	}
	content := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	run("c1")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || content() != "c1" {
		t.Fatalf("first write: %v, %v, %q", fi, err, content())
	}
	// Current: nothing is written (mv would give the file a new inode).
	ino := func() uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	run("c1")
	if ino() != before {
		t.Error("a current credential was written again")
	}
	run("c2")
	if content() != "c2" || ino() == before {
		t.Errorf("after a new credential: %q, inode kept: %v (not replaced whole)", content(), ino() == before)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
}

// TestCredentialScriptFirstWriteStartsNothing: in a box whose image has the credential's
// directory, a first credential is written by the shell alone, with a PATH that finds no
// program, since each process a box starts costs about 30 ms under gVisor.
func TestCredentialScriptFirstWriteStartsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "cocoonbox")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent-credential")
	runCredentialScript(t, path, t.TempDir(), "c1")
	if b, err := os.ReadFile(path); err != nil || string(b) != "c1" {
		t.Fatalf("first write: %q, %v", b, err)
	}
}

// runCredentialScript runs CredentialScriptExec(cred)'s script with the host's sh, writing path
// instead of wire.CredentialPath, with PATH set to pathEnv.
func runCredentialScript(t *testing.T, path, pathEnv, cred string) {
	t.Helper()
	req := CredentialScriptExec(cred)
	script := strings.ReplaceAll(req.Argv[2], wire.CredentialPath, path)
	sh, err := exec.LookPath(req.Argv[0])
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, req.Argv[1], script)
	cmd.Env = []string{"PATH=" + pathEnv, "COCOONBOX_CRED=" + cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script for %q: %v: %s", cred, err, out)
	}
}

// TestOlderInit: an init older than its credential command (it answers with its usage, as
// image/boxinit's main prints it) and an image without the init at its path (the engine refuses
// the command) are told apart from a credential write that failed, so only they fall back to
// the shell script.
func TestOlderInit(t *testing.T) {
	usage := sandbox.ExecResult{ExitCode: 1, Stderr: "cocoonbox-init: usage: cocoonbox-init [init | relay init | relay tcp PORT]\n"}
	failed := sandbox.ExecResult{ExitCode: 1, Stderr: "cocoonbox-init: credential: read-only file system\n"}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"usage":      {CredentialResult(usage), true},
		"no init":    {fmt.Errorf("exec: %w", sandbox.ErrInvalid), true},
		"failed":     {CredentialResult(failed), false},
		"written":    {CredentialResult(sandbox.ExecResult{}), false},
		"engine off": {fmt.Errorf("exec: %w", sandbox.ErrUnavailable), false},
	} {
		if got := OlderInit(tc.err); got != tc.want {
			t.Errorf("%s: OlderInit(%v) = %v", name, tc.err, got)
		}
	}
	if cocoonbox.ErrorCode(CredentialResult(usage)) != cocoonbox.EUnavailable {
		t.Errorf("an older init's answer is not unavailable: %v", CredentialResult(usage))
	}
}
