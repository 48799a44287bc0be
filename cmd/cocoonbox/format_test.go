package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/name.golden, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (go test -update rewrites it)\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

func TestFormats(t *testing.T) {
	cases := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"box_ls", func(w io.Writer) error { return writeBoxes(w, sampleBoxes()) }},
		{"box_ls_empty", func(w io.Writer) error { return writeBoxes(w, nil) }},
		{"box_ls_tree", func(w io.Writer) error { return writeBoxTree(w, sampleForks()) }},
		{"box_show_fork", func(w io.Writer) error { return writeBox(w, sampleForks()[1]) }},
		{"box_show", func(w io.Writer) error { return writeBox(w, sampleBoxes()[0]) }},
		{"box_show_failed", func(w io.Writer) error { return writeBox(w, sampleBoxes()[1]) }},
		{"box_line", func(w io.Writer) error { return boxLine(w, sampleBoxes()[1]) }},
		{"box_snapshots", func(w io.Writer) error { return writeSnapshots(w, sampleSnapshots()) }},
		{"box_snapshot", func(w io.Writer) error { return snapshotLine(w, sampleSnapshots()[0]) }},
		{"box_shares", func(w io.Writer) error { return writeShares(w, sampleShares()) }},
		{"token_ls", func(w io.Writer) error { return writeTokens(w, sampleTokens(), t0) }},
		{"admin_user_ls", func(w io.Writer) error { return writeUsers(w, sampleUsers()) }},
		{"admin_nodes", func(w io.Writer) error { return writeNodes(w, sampleNodes(), t0) }},
		{"admin_nodes_empty", func(w io.Writer) error { return writeNodes(w, nil, t0) }},
		{"vault_ls", func(w io.Writer) error {
			return writeSecrets(w, []*cbv1.Secret{{Name: "OPENAI_API_KEY", CreatedAt: sampleBoxes()[0].CreatedAt}, {Name: "GH_TOKEN"}})
		}},
		{"box_ls_json", func(w io.Writer) error { return writeJSONList(w, sampleBoxes()) }},
		{"box_ls_json_empty", func(w io.Writer) error { return writeJSONList[*cbv1.Box](w, nil) }},
		{"box_show_json", func(w io.Writer) error { return writeJSON(w, sampleBoxes()[0]) }},
		{"box_snapshots_json", func(w io.Writer) error { return writeJSONList(w, sampleSnapshots()) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.write(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 734003200: "700.0 MiB", 3 << 40: "3.0 TiB", 5 << 50: "5120.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("boom"), 1},
		{usageError("bad"), 2},
		{cli.Exit("", 42), 42},
		{apiError(status.Error(codes.InvalidArgument, "name: bad")), 2},
		{apiError(status.Error(codes.OutOfRange, "x")), 2},
		{apiError(status.Error(codes.NotFound, "box \"x\" not found")), 3},
		{apiError(status.Error(codes.Unauthenticated, "x")), 4},
		{apiError(status.Error(codes.PermissionDenied, "x")), 4},
		{apiError(status.Error(codes.AlreadyExists, "x")), 5},
		{apiError(status.Error(codes.FailedPrecondition, "x")), 5},
		{apiError(status.Error(codes.Aborted, "x")), 5},
		{apiError(status.Error(codes.Unavailable, "x")), 6},
		{apiError(status.Error(codes.ResourceExhausted, "x")), 6},
		{apiError(quotaStatus("quota: boxes per user (3) reached")), 7},
		{quotaStatus("quota: boxes per user (3) reached"), 7},
		{apiError(status.Error(codes.DeadlineExceeded, "x")), 6},
		{apiError(status.Error(codes.Internal, "internal error")), 1},
		{apiError(status.Error(codes.Unknown, "x")), 1},
		{apiError(errors.New("not a status")), 1},
		{status.Error(codes.NotFound, "raw status"), 3},
	}
	for _, tc := range cases {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	// The message is the status message's first line, which names the field.
	if got := apiError(status.Error(codes.InvalidArgument, "name: too long\ndetail")).Error(); got != "name: too long" {
		t.Errorf("message %q", got)
	}
	if got := apiError(status.Error(codes.NotFound, "")).Error(); got != "notfound" {
		t.Errorf("empty message becomes %q", got)
	}
}

func TestReport(t *testing.T) {
	var buf bytes.Buffer
	if code := report(apiError(status.Error(codes.NotFound, `box "x" not found`)), &buf); code != 3 || buf.String() != "cocoonbox: box \"x\" not found\n" {
		t.Errorf("report: %d %q", code, buf.String())
	}
	buf.Reset()
	if code := report(cli.Exit("", 7), &buf); code != 7 || buf.Len() != 0 {
		t.Errorf("exec exit code: %d %q", code, buf.String())
	}
}

func TestProgressOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &printer{errw: &buf, isTerm: func(any) bool { return false }}
	p.progress("waking web")()
	if buf.Len() != 0 {
		t.Fatalf("progress wrote %q to a non-terminal", buf.String())
	}
	p.isTerm = func(any) bool { return true }
	stop := p.progress("waking web")
	stop()
	stop() // idempotent
	if out := buf.String(); !strings.Contains(out, "waking web 0.") || !strings.HasSuffix(out, "\r\x1b[K") {
		t.Fatalf("progress %q", out)
	}
}

func TestConfirm(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, "\n": false, "n\n": false, "": false, "yes": true} {
		var w bytes.Buffer
		got, err := confirm(strings.NewReader(in), &w, "Delete box web?")
		if err != nil || got != want || w.String() != "Delete box web? [y/N] " {
			t.Errorf("confirm(%q) = %v %v, prompt %q", in, got, err, w.String())
		}
	}
}

func TestRemoteSpec(t *testing.T) {
	cases := []struct {
		in, box, path string
		ok            bool
	}{
		{"web:/root/a", "web", "/root/a", true},
		{"bx_00000000000000a1:/x", "bx_00000000000000a1", "/x", true},
		{"./a:b", "", "", false},
		{"/tmp/a:b", "", "", false},
		{"plain", "", "", false},
		{":/x", "", "", false},
		{"-", "", "", false},
	}
	for _, tc := range cases {
		box, p, ok := remoteSpec(tc.in)
		if box != tc.box || p != tc.path || ok != tc.ok {
			t.Errorf("remoteSpec(%q) = %q %q %v", tc.in, box, p, ok)
		}
	}
}

// quotaStatus is a status as the API sends for a quota: RESOURCE_EXHAUSTED with a QuotaFailure.
func quotaStatus(msg string) error {
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&errdetails.QuotaFailure{
		Violations: []*errdetails.QuotaFailure_Violation{{Subject: "user", Description: msg}}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
