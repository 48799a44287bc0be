package boxsvc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// TestFileRoundTrip: a file written through the API (larger than one read chunk) reads back the
// same, with its mode, in a directory the write created, and no temporary file is left beside it.
func TestFileRoundTrip(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	dan := e.users[cocoonbox.RoleDriver]
	dir := "/tmp/" + string(e.box)
	t.Cleanup(func() { e.exec(t, "rm", "-rf", dir) })
	p := dir + "/sub/data.bin"
	content := make([]byte, 4<<20+10)
	rand.Read(content)

	n, err := e.svc.WriteFile(ctx, dan, e.box, p, content, 0o600)
	if err != nil || n != int64(len(content)) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if got := e.exec(t, "stat", "-c", "%a %s", p).Stdout; got != "600 4194314\n" {
		t.Fatalf("stat in the box: %q", got)
	}
	if got := e.exec(t, "ls", "-A", dir+"/sub").Stdout; got != "data.bin\n" {
		t.Fatalf("directory holds %q, want only the file", got)
	}
	got, mode, err := e.svc.ReadFile(ctx, dan, e.box, p)
	if err != nil || mode != 0o600 || !bytes.Equal(got, content) {
		t.Fatalf("read: %d bytes (equal %v), mode %o, %v", len(got), bytes.Equal(got, content), mode, err)
	}
	if _, err := e.svc.WriteFile(ctx, dan, e.box, p, []byte("short"), 0); err != nil {
		t.Fatal(err)
	}
	if got, mode, err := e.svc.ReadFile(ctx, dan, e.box, p); err != nil || string(got) != "short" || mode != 0o644 {
		t.Fatalf("read after overwrite: %q, %o, %v; want the new content, mode 0644", got, mode, err)
	}
	empty := dir + "/empty"
	if _, err := e.svc.WriteFile(ctx, dan, e.box, empty, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.svc.ReadFile(ctx, dan, e.box, empty); err != nil || len(got) != 0 {
		t.Fatalf("read of an empty file: %q, %v", got, err)
	}
}

// TestFileValidation: a bad path, content or mode is refused naming the field, before anything
// reaches the box.
func TestFileValidation(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	ann := e.users[cocoonbox.RoleOwner]
	for p, msg := range map[string]string{
		"":            "path: is required",
		"notes.txt":   `path: must be absolute, got "notes.txt"`,
		"/tmp/dir/":   `path: names a directory, got "/tmp/dir/"`,
		"/tmp/a\x00b": "path: must not contain NUL",
	} {
		_, _, err := e.svc.ReadFile(ctx, ann, e.box, p)
		wantError(t, "read "+p, err, cocoonbox.EInvalid, "path", msg)
		_, err = e.svc.WriteFile(ctx, ann, e.box, p, []byte("x"), 0)
		wantError(t, "write "+p, err, cocoonbox.EInvalid, "path", msg)
	}
	_, err := e.svc.WriteFile(ctx, ann, e.box, "/tmp/big", make([]byte, boxsvc.MaxFileBytes+1), 0)
	wantError(t, "oversized write", err, cocoonbox.EInvalid, "content", "content: is 8388609 bytes; at most 8388608")
	_, err = e.svc.WriteFile(ctx, ann, e.box, "/tmp/f", []byte("x"), 0o10000)
	wantError(t, "mode beyond permission bits", err, cocoonbox.EInvalid, "mode", "mode: must be permission bits (at most 07777), got 10000")
	if n := len(e.sandbox.Execs()); n != 0 {
		t.Fatalf("invalid requests reached the box: %+v", e.sandbox.Execs())
	}
}

// TestFileErrors: a missing file is not found and a directory invalid, naming the path; a file over the
// limit is refused before its bytes are read; a write the box fails carries the box's reason and
// leaves nothing behind. (Hostile box text in these messages is fuzzed in answers_test.go.)
func TestFileErrors(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	ann := e.users[cocoonbox.RoleOwner]
	dir := "/tmp/" + string(e.box)
	e.exec(t, "mkdir", "-p", dir+"/d")
	t.Cleanup(func() { e.exec(t, "rm", "-rf", dir) })

	_, _, err := e.svc.ReadFile(ctx, ann, e.box, dir+"/missing")
	wantError(t, "read a missing file", err, cocoonbox.ENotFound, "path", `path: "`+dir+`/missing": No such file or directory`)
	_, _, err = e.svc.ReadFile(ctx, ann, e.box, dir+"/d")
	wantError(t, "read a directory", err, cocoonbox.EInvalid, "path", `path: "`+dir+`/d": is a directory, not a file`)
	// The caller's own path is quoted printable in the message, as the box's text is.
	_, _, err = e.svc.ReadFile(ctx, ann, e.box, dir+"/\x1b[31mred")
	wantError(t, "read a path with an escape", err, cocoonbox.ENotFound, "path", `path: "`+dir+`/ [31mred": No such file or directory`)

	e.exec(t, "truncate", "-s", "9M", dir+"/big")
	before := len(e.sandbox.Execs())
	_, _, err = e.svc.ReadFile(ctx, ann, e.box, dir+"/big")
	wantError(t, "read a file over the limit", err, cocoonbox.EInvalid, "path",
		`path: "`+dir+`/big" is 9437184 bytes; files over 8388608 bytes are not read through the API`)
	if n := len(e.sandbox.Execs()) - before; n != 1 {
		t.Errorf("reading an oversized file ran %d commands, want only the stat", n)
	}

	// A file where the write needs a directory: the box's reason comes back.
	e.exec(t, "sh", "-c", `: > "$1"`, "sh", dir+"/plain")
	_, err = e.svc.WriteFile(ctx, ann, e.box, dir+"/plain/f", []byte("x"), 0)
	msg := cocoonbox.ErrorMessage(err)
	if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !strings.HasPrefix(msg, `path: "`+dir+`/plain/f": `) || !strings.HasSuffix(msg, ": File exists") {
		t.Errorf("write under a file: %q (%s); want invalid naming the path, with the box's reason", msg, cocoonbox.ErrorCode(err))
	}
	if got := e.exec(t, "ls", "-A", dir).Stdout; strings.Contains(got, "cocoonbox-") {
		t.Errorf("a failed write left its temporary file: %q", got)
	}
}

// TestCheckPort: the ports users may open are 1 to 65535 but the agent's own.
func TestCheckPort(t *testing.T) {
	for port, ok := range map[int]bool{1: true, 8000: true, 65535: true, 0: false, 65536: false, -1: false, 7070: false, 7071: false, 7072: false} {
		err := boxsvc.CheckPort(port)
		if (err == nil) != ok || err != nil && cocoonbox.ErrorField(err) != "port" {
			t.Errorf("CheckPort(%d) = %v", port, err)
		}
	}
}
