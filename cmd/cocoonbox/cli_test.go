package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loomhand/cocoonbox/internal/config"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// runCLI runs the real command line in-process with stdin, as main would, and returns stdout,
// stderr (including main's one-line error) and the exit code.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(stdin), &out, &errb
	code = report(app.Run(append([]string{"cocoonbox"}, args...)), &errb)
	return out.String(), errb.String(), code
}

// withFake starts a fake API and points the CLI at it through the environment, with a CLI config
// directory of the test's own.
func withFake(t *testing.T) *fakeAPI {
	t.Helper()
	f, endpoint := startFake(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("COCOONBOX_ENDPOINT", endpoint)
	t.Setenv("COCOONBOX_TOKEN", fakeToken)
	t.Setenv("COCOONBOX_OUTPUT", "")
	return f
}

// runOK is runCLI for a command that must succeed; it returns stdout.
func runOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	stdout, stderr, code := runCLI(t, stdin, args...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	return stdout
}

func TestBoxLsTextAndJSON(t *testing.T) {
	withFake(t)
	out := runOK(t, "", "box", "ls")
	golden(t, "box_ls", []byte(out))

	// --output after the command, before it, and from the environment all give one JSON array.
	for _, args := range [][]string{{"box", "ls", "--output", "json"}, {"-o", "json", "box", "ls"}, {"box", "ls", "-o=json"}, {"box", "ls"}} {
		if len(args) == 2 {
			t.Setenv("COCOONBOX_OUTPUT", "json")
		}
		out := runOK(t, "", args...)
		var boxes []json.RawMessage
		if err := json.Unmarshal([]byte(out), &boxes); err != nil || len(boxes) != 2 {
			t.Fatalf("%v: not a JSON array of 2: %v\n%s", args, err, out)
		}
		var b cbv1.Box
		if err := protojson.Unmarshal(boxes[1], &b); err != nil || b.GetName() != "build-farm" || b.GetLastError() != "wake: no capacity" {
			t.Fatalf("%v: box %v %v", args, &b, err)
		}
	}
	// The innermost --output wins over the environment.
	out = runOK(t, "", "box", "ls", "-o", "text")
	golden(t, "box_ls", []byte(out))
}

func TestBoxCommandsSendTheirArguments(t *testing.T) {
	f := withFake(t)
	cases := []struct {
		args []string
		want proto.Message
		out  string
	}{
		{[]string{"box", "create", "--name", "dev", "--size", "medium"}, &cbv1.CreateBoxRequest{Name: "dev", Size: "medium"}, "dev (bx_00000000000000c3) running\n"},
		{[]string{"box", "create", "dev2"}, &cbv1.CreateBoxRequest{Name: "dev2", Size: "small"}, "dev2 (bx_00000000000000c3) running\n"},
		{[]string{"box", "create", "site", "--network", "internet"}, &cbv1.CreateBoxRequest{Name: "site", Size: "small", Network: "internet"}, "site (bx_00000000000000c3) running\n"},
		{[]string{"box", "create", "db", "--allow", "10.0.0.5:5432", "--allow", "1.2.3.0/24"},
			&cbv1.CreateBoxRequest{Name: "db", Size: "small", Network: "allow", NetworkAllow: []string{"10.0.0.5:5432", "1.2.3.0/24"}}, "db (bx_00000000000000c3) running\n"},
		{[]string{"box", "show", "web"}, &cbv1.GetBoxRequest{Box: "web"}, ""},
		{[]string{"box", "wake", "bx_00000000000000a1"}, &cbv1.WakeBoxRequest{Box: "bx_00000000000000a1"}, "web (bx_00000000000000a1) running\n"},
		{[]string{"box", "hibernate", "web"}, &cbv1.HibernateBoxRequest{Box: "web"}, "web (bx_00000000000000a1) hibernated\n"},
		{[]string{"box", "snapshot", "web"}, &cbv1.SnapshotBoxRequest{Box: "web"}, "sn_0002 complete, 700.0 MiB, 48211 files, changes since sn_0001 (box bx_00000000000000a1)\n"},
		{[]string{"box", "restore", "web", "--snapshot", "sn_0001"}, &cbv1.RestoreBoxRequest{Box: "web", SnapshotId: "sn_0001"}, ""},
		{[]string{"box", "restore", "web"}, &cbv1.RestoreBoxRequest{Box: "web"}, ""},
		{[]string{"box", "recreate", "web"}, &cbv1.RecreateBoxRequest{Box: "web"}, ""},
		{[]string{"box", "policy", "web", "--lease-idle", "5m"}, &cbv1.SetPolicyRequest{Box: "web", LeaseIdleSeconds: proto.Int64(300)},
			"idle 15m, durable, snapshot every 30m, lease idle 5m, keep 5 snapshots\n"},
		{[]string{"policy", "default", "--idle", "1h", "--snapshot-every", "2h"}, &cbv1.SetPolicyDefaultsRequest{IdleSeconds: proto.Int64(3600), SnapshotEverySeconds: proto.Int64(7200)},
			"idle 1h, durable, snapshot every 2h, lease idle 2m, keep 5 snapshots\n"},
		{[]string{"box", "policy", "web", "--snapshot-every", "1h"}, &cbv1.SetPolicyRequest{Box: "web", SnapshotEverySeconds: proto.Int64(3600)},
			"idle 15m, durable, snapshot every 1h, keep 5 snapshots\n"},
		{[]string{"box", "rm", "web", "--purge-snapshots", "--yes"}, &cbv1.DeleteBoxRequest{Box: "bx_00000000000000a1", PurgeSnapshots: true}, "web (bx_00000000000000a1) deleted\n"},
		{[]string{"box", "rm", "web"}, &cbv1.DeleteBoxRequest{Box: "bx_00000000000000a1"}, ""},
		{[]string{"box", "unshare", "web", "bob"}, &cbv1.UnshareBoxRequest{Box: "web", User: "bob"}, "bob no longer shares box web\n"},
		{[]string{"box", "exec", "web", "--cwd", "/tmp", "-e", "A=1", "--timeout", "90s", "--", "ls", "-l", "--all"},
			&cbv1.ExecRequest{Box: "web", Argv: []string{"ls", "-l", "--all"}, Cwd: "/tmp", Env: map[string]string{"A": "1"}, TimeoutSeconds: 90}, ""},
		{[]string{"box", "exec", "web", "uname", "-a"}, &cbv1.ExecRequest{Box: "web", Argv: []string{"uname", "-a"}}, "[\"uname\" \"-a\"]\n"},
		{[]string{"box", "exec", "--", "web", "uname"}, &cbv1.ExecRequest{Box: "web", Argv: []string{"uname"}}, ""},
		{[]string{"token", "revoke", "tk_1"}, &cbv1.RevokeTokenRequest{Id: "tk_1"}, "revoked tk_1\n"},
		{[]string{"vault", "rm", "GH_TOKEN"}, &cbv1.DeleteSecretRequest{Name: "GH_TOKEN"}, "deleted GH_TOKEN\n"},
		{[]string{"box", "network", "web", "--allow", "198.18.0.1:443"}, &cbv1.SetBoxNetworkRequest{Box: "web", Network: "allow", NetworkAllow: []string{"198.18.0.1:443"}}, ""},
		{[]string{"box", "network", "web", "--network", "internet"}, &cbv1.SetBoxNetworkRequest{Box: "web", Network: "internet"}, ""},
		{[]string{"box", "policy", "web", "--idle", "30m", "--durable", "--keep", "10"},
			&cbv1.SetPolicyRequest{Box: "web", IdleSeconds: proto.Int64(1800), Durable: proto.Bool(true), KeepSnapshots: proto.Int32(10)},
			"idle 30m, durable, snapshot every 30m, keep 10 snapshots\n"},
		{[]string{"box", "policy", "web", "--no-durable"}, &cbv1.SetPolicyRequest{Box: "web", Durable: proto.Bool(false)}, "idle 15m, not durable, snapshot every 30m, keep 5 snapshots\n"},
		{[]string{"box", "policy", "web", "--idle", "0"}, &cbv1.SetPolicyRequest{Box: "web", IdleSeconds: proto.Int64(0)}, "idle never, durable, snapshot every 30m, keep 5 snapshots\n"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := runOK(t, "", tc.args...)
			got := f.lastOf(tc.want)
			if rid := got.ProtoReflect().Descriptor().Fields().ByName("request_id"); rid != nil && !tc.want.ProtoReflect().Has(rid) {
				// A call that changes a box carries a new request ID, for its resends.
				if !got.ProtoReflect().Has(rid) {
					t.Errorf("request %v has no request_id", got)
				}
				got = proto.Clone(got)
				got.ProtoReflect().Clear(rid)
			}
			if !proto.Equal(got, tc.want) {
				t.Errorf("request %v, want %v", got, tc.want)
			}
			if tc.out != "" && out != tc.out {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
		})
	}
}

// lastOf returns the last request of want's type.
func (f *fakeAPI) lastOf(want proto.Message) proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		if r.ProtoReflect().Descriptor() == want.ProtoReflect().Descriptor() {
			return r
		}
	}
	return nil
}

// TestCreateSaysWhatItWaitsFor: a create the engine cannot serve yet notes on stderr what it
// waits for, once, and ends with the reason when it gives up.
func TestCreateSaysWhatItWaitsFor(t *testing.T) {
	withFake(t)
	waitingEvery = 20 * time.Millisecond
	t.Cleanup(func() { waitingEvery = 2 * time.Second })
	_, stderr, code := runCLI(t, "", "box", "create", "--name", "stuck")
	if code == 0 || strings.Count(stderr, "waiting: claim sandbox: template \"desktop\" is not available") != 1 ||
		!strings.Contains(stderr, "image is not built") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestAdminPools: --set changes one pool and keeps the others, 0 drains one, and a malformed
// --set is a usage error before anything is sent.
func TestAdminPools(t *testing.T) {
	f := withFake(t)
	golden(t, "admin_pools", []byte(runOK(t, "", "admin", "pools")))
	runOK(t, "", "admin", "pools", "--set", "desktop/medium=1")
	want := &cbv1.SetPoolsRequest{Pools: []*cbv1.WarmPool{
		{Template: "desktop", Size: "small", Net: "none", Target: 2},
		{Template: "desktop", Size: "medium", Net: "none", Target: 1},
	}}
	if got := f.lastOf(want); !proto.Equal(got, want) {
		t.Fatalf("SetPools %v, want %v", got, want)
	}
	out := runOK(t, "", "admin", "pools", "--set", "desktop/small=0")
	if strings.Contains(out, "small") || !strings.Contains(out, "medium") {
		t.Fatalf("after draining desktop/small:\n%s", out)
	}
	for _, bad := range []string{"desktop=2", "desktop/small", "desktop/small=-1", "/small=1"} {
		if _, stderr, code := runCLI(t, "", "admin", "pools", "--set", bad); code == 0 || !strings.Contains(stderr, "TEMPLATE/SIZE=N") {
			t.Errorf("--set %s: exit %d, %q; want a usage error naming the form", bad, code, stderr)
		}
	}
}

func TestBoxShowTextAndJSON(t *testing.T) {
	withFake(t)
	golden(t, "box_show", []byte(runOK(t, "", "box", "show", "web")))
	out := runOK(t, "", "box", "show", "web", "-o", "json")
	var b cbv1.Box
	if err := protojson.Unmarshal([]byte(out), &b); err != nil || !proto.Equal(&b, sampleBoxes()[0]) {
		t.Fatalf("json %v %v\n%s", &b, err, out)
	}
	golden(t, "box_snapshots", []byte(runOK(t, "", "box", "snapshots", "web")))
	golden(t, "box_shares", []byte(runOK(t, "", "box", "shares", "web")))
	golden(t, "box_events", []byte(runOK(t, "", "box", "events", "web")))
	if out := runOK(t, "", "box", "events", "web", "-o", "json"); !strings.HasPrefix(out, "[") || !strings.Contains(out, `"box.hibernated"`) {
		t.Errorf("box events -o json: %s", out)
	}
	// The fake's address differs each run; the golden names it API.
	golden(t, "box_ports", []byte(strings.ReplaceAll(runOK(t, "", "box", "ports", "web"), os.Getenv("COCOONBOX_ENDPOINT"), "API")))
	if out := runOK(t, "", "box", "ports", "build-farm"); !strings.Contains(out, "Nothing in the box listens") {
		t.Errorf("ports of a sleeping box: %q", out)
	}
}

// TestExecPassesStdinOn: a command's standard input is sent with it, unless -n; more than the
// limit is a usage error before anything is sent.
func TestExecPassesStdinOn(t *testing.T) {
	f := withFake(t)
	runCLI(t, "some input\n", "box", "exec", "web", "--", "wc", "-c")
	if got := f.lastOf(&cbv1.ExecRequest{}).(*cbv1.ExecRequest); string(got.GetStdin()) != "some input\n" {
		t.Errorf("stdin sent %q", got.GetStdin())
	}
	runCLI(t, "kept here\n", "box", "exec", "-n", "web", "--", "wc", "-c")
	if got := f.lastOf(&cbv1.ExecRequest{}).(*cbv1.ExecRequest); len(got.GetStdin()) != 0 {
		t.Errorf("-n sent stdin %q", got.GetStdin())
	}
	_, stderr, code := runCLI(t, strings.Repeat("x", maxExecStdin+1), "box", "exec", "web", "--", "wc", "-c")
	if code != 2 || !strings.Contains(stderr, "over 512 KiB") {
		t.Errorf("oversized stdin: exit %d, %q", code, stderr)
	}
}

func TestExecPassesOnTheExitCode(t *testing.T) {
	withFake(t)
	stdout, stderr, code := runCLI(t, "", "box", "exec", "web", "--", "exit", "7")
	if code != 7 || stdout != "out\n" || stderr != "err\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, "", "box", "exec", "-o", "json", "web", "--", "exit", "3")
	var resp cbv1.ExecResponse
	if err := protojson.Unmarshal([]byte(stdout), &resp); err != nil || code != 3 || resp.GetExitCode() != 3 || resp.GetStdout() != "out\n" {
		t.Fatalf("json exec: exit %d, %v %v", code, &resp, err)
	}
	// A failed call is the call's exit code, not the command's.
	_, stderr, code = runCLI(t, "", "box", "exec", "nope", "--", "exit", "7")
	if code != exitNotFound || stderr != "cocoonbox: box \"nope\" not found\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestErrorsAreOneLineWithExitCodes(t *testing.T) {
	withFake(t)
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"box", "show", "nope"}, 3, `box "nope" not found`},
		{[]string{"box", "create", "--name", "Web"}, 2, "name: want a lowercase letter"},
		{[]string{"box", "create", "--name", "web"}, 5, `box "web" already exists`},
		{[]string{"box", "hibernate", "build-farm"}, 5, "box build-farm is hibernated"},
		{[]string{"box", "wake", "build-farm"}, 6, "no capacity"},
		{[]string{"box", "shares", "build-farm"}, 4, "needs the admin role"},
		{[]string{"box", "share", "web", "bob", "--role", "owner"}, 2, "role: want viewer, driver or admin"},
		{[]string{"box", "ls", "--token", "wrong"}, 4, "invalid or revoked token"},
		{[]string{"token", "revoke", "tk_x"}, 3, `token "tk_x" not found`},
		// Usage errors never reach the API.
		{[]string{"box", "create"}, 2, "--name is required"},
		{[]string{"box", "show"}, 2, "usage: cocoonbox box show BOX"},
		{[]string{"box", "show", "a", "b"}, 2, "usage: cocoonbox box show BOX"},
		{[]string{"box", "ls", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"box", "show", "web", "--nope"}, 2, "flag provided but not defined: --nope"},
		{[]string{"box", "frob"}, 2, `box: unknown command "frob"`},
		{[]string{"frob"}, 2, `unknown command "frob"`},
		{[]string{"box", "ls", "-o", "yaml"}, 2, `--output: want text or json, got "yaml"`},
		{[]string{"box", "exec", "web"}, 2, "usage: cocoonbox box exec BOX -- CMD"},
		{[]string{"box", "exec", "web", "-e", "NOEQUALS", "--", "ls"}, 2, "--env: want KEY=VALUE"},
		{[]string{"box", "share", "web", "bob"}, 2, "--role is required"},
		{[]string{"box", "share", "web", "bob", "--role", "viewer", "--expires", "-1h"}, 2, "--expires must be positive"},
		{[]string{"box", "cp", "a", "b"}, 2, "exactly one of SRC and DST"},
		{[]string{"box", "cp", "web:/a", "web:/b"}, 2, "exactly one of SRC and DST"},
		{[]string{"box", "cp", "-", "web:rel"}, 2, "must be absolute"},
		{[]string{"box", "cp", "/does/not/exist", "web:/x"}, 3, "no such file"},
		{[]string{"token", "create"}, 2, "--name is required"},
		{[]string{"vault", "set", "K"}, 2, "empty value"},
		{[]string{"completion", "fish"}, 2, "want bash or zsh"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.HasPrefix(stderr, "cocoonbox: ") || !strings.Contains(stderr, tc.stderr) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d (want %d), stderr %q (want one line containing %q)", code, tc.code, stderr, tc.stderr)
			}
			if stdout != "" {
				t.Fatalf("stdout %q on failure", stdout)
			}
		})
	}
}

func TestCpRoundTrip(t *testing.T) {
	f := withFake(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", "box", "cp", src, "web:/root/bin/")
	w := f.last("WriteFile").(*cbv1.WriteFileRequest)
	if w.GetPath() != "/root/bin/run.sh" || w.GetMode() != 0o750 || string(w.GetContent()) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("write %v", w)
	}
	runOK(t, "from stdin", "box", "cp", "--mode", "600", "-", "web:/tmp/in.txt")
	if w := f.last("WriteFile").(*cbv1.WriteFileRequest); w.GetMode() != 0o600 || string(w.GetContent()) != "from stdin" {
		t.Fatalf("write from stdin %v", w)
	}
	if out := runOK(t, "", "box", "cp", "web:/tmp/in.txt", "-"); out != "from stdin" {
		t.Fatalf("download to stdout %q", out)
	}
	out := runOK(t, "", "box", "cp", "-o", "json", "web:/root/bin/run.sh", dir+"/")
	var res struct {
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Bytes != 18 {
		t.Fatalf("json %q %v", out, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "run.sh"))
	if err != nil || res.Path != filepath.Join(dir, "run.sh") || fi.Mode().Perm() != 0o750 {
		t.Fatalf("downloaded %v %v %q", fi, err, res.Path)
	}
	if _, stderr, code := runCLI(t, "", "box", "cp", "web:/missing", filepath.Join(dir, "m")); code != 3 || !strings.Contains(stderr, "path: /missing") {
		t.Fatalf("missing: %d %q", code, stderr)
	}
}

// TestCpWithoutFilesRoute: against a server that streams files over gRPC but serves no files
// route (a proxy that passes only gRPC), box cp sends the whole file over UploadFile, stdin
// included: the route's refusal came before any byte was read.
func TestCpWithoutFilesRoute(t *testing.T) {
	f := withFake(t)
	f.streams = true
	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	content := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several messages
	if err := os.WriteFile(src, content, 0o640); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", "box", "cp", src, "web:/home/user/")
	w := f.last("UploadFile").(*cbv1.WriteFileRequest)
	if w.GetPath() != "/home/user/big.bin" || w.GetMode() != 0o640 || !bytes.Equal(w.GetContent(), content) {
		t.Fatalf("upload of %s: mode %o, %d bytes", w.GetPath(), w.GetMode(), len(w.GetContent()))
	}
	runOK(t, "from stdin", "box", "cp", "-", "web:/tmp/in.txt")
	if w := f.last("UploadFile").(*cbv1.WriteFileRequest); string(w.GetContent()) != "from stdin" {
		t.Fatalf("upload from stdin: %q", w.GetContent())
	}
}

func TestShareSendsRoleAndExpiry(t *testing.T) {
	f := withFake(t)
	before := time.Now()
	out := runOK(t, "", "box", "share", "web", "carol", "--role", "viewer", "--expires", "24h")
	req := f.last("ShareBox").(*cbv1.ShareBoxRequest)
	exp := req.GetExpiresAt().AsTime()
	if req.GetRole() != "viewer" || req.GetUser() != "carol" || exp.Before(before.Add(24*time.Hour)) || exp.After(time.Now().Add(24*time.Hour)) {
		t.Fatalf("share %v", req)
	}
	if !strings.HasPrefix(out, "carol is viewer of box bx_00000000000000a1 until ") {
		t.Fatalf("stdout %q", out)
	}
}

func TestTokenCreatePrintsOnlyTheSecret(t *testing.T) {
	f := withFake(t)
	stdout, stderr, code := runCLI(t, "", "token", "create", "--name", "ci", "--ttl", "720h")
	if code != 0 || stdout != "cbx_newsecret\n" || !strings.Contains(stderr, "tk_9") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if r := f.last("CreateToken").(*cbv1.CreateTokenRequest); r.GetTtlSeconds() != 720*3600 || r.GetName() != "ci" {
		t.Fatalf("request %v", r)
	}
	runOK(t, "", "token", "create", "--name", "dash", "--scope", "read")
	if r := f.last("CreateToken").(*cbv1.CreateTokenRequest); r.GetScope() != "read" || r.GetName() != "dash" {
		t.Fatalf("--scope read: request %v", r)
	}
	out := runOK(t, "", "-o", "json", "token", "create", "--name", "ci")
	var resp cbv1.CreateTokenResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || resp.GetSecret() != "cbx_newsecret" {
		t.Fatalf("json %q %v", out, err)
	}
	out = runOK(t, "", "token", "ls", "-o", "json")
	var toks []json.RawMessage
	if err := json.Unmarshal([]byte(out), &toks); err != nil || len(toks) != 3 {
		t.Fatalf("token ls json %q %v", out, err)
	}
}

// TestAdminUser: create prints only the new user's secret on stdout, disable says what it did,
// and an unknown user's refusal names them.
func TestAdminUser(t *testing.T) {
	f := withFake(t)
	stdout, stderr, code := runCLI(t, "", "admin", "user", "create", "eve", "--admin")
	if code != 0 || stdout != "cbx_evesecret\n" || !strings.Contains(stderr, "us_eve") || !strings.Contains(stderr, "admin eve") {
		t.Fatalf("create: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if r := f.last("CreateUser").(*cbv1.CreateUserRequest); r.GetName() != "eve" || !r.GetAdmin() {
		t.Fatalf("create request %v", r)
	}
	if out := runOK(t, "", "admin", "user", "disable", "bob"); out != "disabled bob: 2 tokens revoked, 1 agent runs cancelled\n" {
		t.Fatalf("disable: %q", out)
	}
	if _, stderr, code := runCLI(t, "", "admin", "user", "disable", "zed"); code == 0 || !strings.Contains(stderr, "zed") {
		t.Fatalf("disable an unknown user: exit %d stderr %q", code, stderr)
	}
	out := runOK(t, "", "admin", "user", "ls", "-o", "json")
	var users []json.RawMessage
	if err := json.Unmarshal([]byte(out), &users); err != nil || len(users) != 3 {
		t.Fatalf("user ls json %q %v", out, err)
	}
}

func TestVaultSetReadsStdin(t *testing.T) {
	f := withFake(t)
	out := runOK(t, "sk-123\n", "vault", "set", "OPENAI_API_KEY")
	if r := f.last("SetSecret").(*cbv1.SetSecretRequest); r.GetValue() != "sk-123" || r.GetName() != "OPENAI_API_KEY" || out != "stored OPENAI_API_KEY\n" {
		t.Fatalf("request %v, stdout %q", r, out)
	}
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("line1\nline2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", "vault", "set", "MULTI", "--value-file", file)
	if r := f.last("SetSecret").(*cbv1.SetSecretRequest); r.GetValue() != "line1\nline2" {
		t.Fatalf("value %q", r.GetValue())
	}
	if out := runOK(t, "", "vault", "ls"); !strings.Contains(out, "OPENAI_API_KEY") {
		t.Fatalf("vault ls %q", out)
	}
}

func TestLoginWritesTheConfig(t *testing.T) {
	_, endpoint := startFake(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("COCOONBOX_ENDPOINT", "")
	t.Setenv("COCOONBOX_TOKEN", "")
	t.Setenv("COCOONBOX_OUTPUT", "")
	path := filepath.Join(home, ".config", "cocoonbox", "config.yaml")

	if _, stderr, code := runCLI(t, "wrong\n", "login", "--endpoint", endpoint, "--token", "-"); code != exitDenied || !strings.Contains(stderr, "invalid or revoked token") {
		t.Fatalf("bad token: exit %d %q", code, stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed login wrote the config: %v", err)
	}
	out := runOK(t, fakeToken+"\n", "login", "--endpoint", endpoint, "--token", "-")
	if !strings.Contains(out, "as ann (us_ann)") {
		t.Fatalf("stdout %q", out)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config %v %v", fi, err)
	}
	cfg, err := config.LoadCLI(path, config.MapEnv(nil))
	if err != nil || cfg.Endpoint != endpoint || cfg.Token != fakeToken {
		t.Fatalf("config %+v %v", cfg, err)
	}
	// Later commands use it.
	golden(t, "box_ls", []byte(runOK(t, "", "box", "ls")))

	out = runOK(t, "", "mcp", "config")
	var snippet struct {
		MCPServers map[string]mcpServer `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(out), &snippet); err != nil {
		t.Fatalf("%q %v", out, err)
	}
	s := snippet.MCPServers["cocoonbox"]
	if s.Type != "http" || s.URL != endpoint+"/mcp" || s.Headers["Authorization"] != "Bearer "+fakeToken {
		t.Fatalf("mcp config %+v", snippet)
	}
}

func TestCompletion(t *testing.T) {
	out := runOK(t, "", "completion", "bash")
	if !strings.Contains(out, "complete -o bashdefault -o default -F _cocoonbox_complete cocoonbox") {
		t.Fatalf("bash %q", out)
	}
	// urfave/cli's default completion reads os.Args, as it is in a real shell.
	args := []string{"box", "--generate-bash-completion"}
	saved := os.Args
	os.Args = append([]string{"cocoonbox"}, args...)
	defer func() { os.Args = saved }()
	out = runOK(t, "", args...)
	for _, want := range []string{"create", "exec", "snapshots"} {
		if !strings.Contains(out, want+"\n") {
			t.Fatalf("box completions %q lack %s", out, want)
		}
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	out := runOK(t, "", "--help")
	for _, want := range []string{"EXIT CODES", "3  not found", "box exec exits with the command's own exit code"} {
		if !strings.Contains(out, want) {
			t.Fatalf("help lacks %q", want)
		}
	}
}

// TestCallTimeout: --timeout bounds a call that does not return, and the command says so and
// fails; box exec keeps its own --timeout (how long the command may run).
func TestCallTimeout(t *testing.T) {
	withFake(t)
	start := time.Now()
	_, stderr, code := runCLI(t, "", "box", "snapshot", "stuck", "--timeout", "300ms")
	if took := time.Since(start); code == 0 || took > 10*time.Second {
		t.Fatalf("box snapshot of a stuck box: exit %d after %s, stderr %q", code, took, stderr)
	}
	t.Logf("stderr: %s", stderr)
	if !strings.Contains(stderr, "no answer within --timeout 300ms") {
		t.Errorf("stderr %q does not say the time ran out", stderr)
	}
	if out, _ := run(t, "box", "exec", "--help"); !strings.Contains(out, "kill the command after this long") {
		t.Errorf("box exec lost its own --timeout:\n%s", out)
	}
}

// TestUnansweredCallsAreSentAgain: a call that changes a box is sent again, with the same
// request ID, while the API does not answer (it restarted under the call), so the server makes
// it one operation; an unavailable answer from the API itself is not resent (box wake of a box
// with no capacity exits at once in TestErrorsAreOneLineWithExitCodes).
func TestUnansweredCallsAreSentAgain(t *testing.T) {
	f := withFake(t)
	out := runOK(t, "", "box", "snapshot", "flaky")
	if !strings.HasPrefix(out, "sn_0002 complete") {
		t.Errorf("stdout %q", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.flaky) != 3 || f.flaky[0] == "" || f.flaky[1] != f.flaky[0] || f.flaky[2] != f.flaky[0] {
		t.Errorf("sends' request IDs %q, want 3 of one", f.flaky)
	}
}

// TestAdminDrain: drain says the node takes no new boxes and its boxes are being moved; with
// --wait it says what became of them, naming each that failed and why; --undo says the node
// takes boxes again, and an unknown node's refusal names it.
func TestAdminDrain(t *testing.T) {
	withFake(t)
	if out := runOK(t, "", "admin", "drain", "node-a"); out != "node node-a is draining: no new box is placed on it, and its 5 boxes are being moved to other nodes (hibernated ones on their next wake)\n" {
		t.Fatalf("drain: %q", out)
	}
	want := "node node-a is draining: 2 boxes moved to other nodes, 1 move on their next wake, 1 failed\n" +
		"  bx_0000000000000004 stays: no_capacity: no node has room for a small box\n"
	if out := runOK(t, "", "admin", "drain", "node-a", "--wait"); out != want {
		t.Fatalf("drain --wait: %q", out)
	}
	if out := runOK(t, "", "admin", "drain", "node-a", "--undo"); out != "node node-a is active: new boxes may be placed on it again\n" {
		t.Fatalf("undo: %q", out)
	}
	if _, stderr, code := runCLI(t, "", "admin", "drain", "node-z"); code == 0 || !strings.Contains(stderr, "node-z") {
		t.Fatalf("drain an unknown node: exit %d stderr %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, "", "admin", "drain", "node-a", "--parallel", "17"); code != exitUsage || !strings.Contains(stderr, "--parallel must be 1 to 16") {
		t.Fatalf("drain with --parallel 17: exit %d stderr %q; want a usage error naming the flag", code, stderr)
	}
}
