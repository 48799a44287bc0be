package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// fakeEngineConfig is a dev configuration whose boxes run in the sandbox fake (real processes
// in their own namespaces, the real sandboxd protocol) instead of gVisor, for tests about what
// the control plane does with a box's answers rather than about the box itself.
func fakeEngineConfig(t *testing.T) config.Dev {
	t.Helper()
	f := sandboxtest.New(t, sandboxtest.Options{})
	if !f.Isolated() {
		// Without namespaces the fake runs commands on the host, where these tests' binds must
		// never land.
		t.Fatal("the sandbox fake cannot give boxes their own namespaces on this machine")
	}
	cfg := boxConfig(t)
	cfg.Sandbox.URL = f.URL
	return cfg
}

// hostileEnv is a dev stack over the fake engine with an API client as the dev user.
func hostileEnv(t *testing.T, cfg config.Dev) (apiEnv, context.Context, string) {
	t.Helper()
	d, ctx, _, _ := newBoxEnv(t, cfg, 4*time.Minute)
	e, token := devAPI(t, d)
	return e, ctx, token
}

// execOK runs a shell script with args in the box as the caller of ctx and fails the test
// unless it exits 0.
func execOK(ctx context.Context, t *testing.T, e apiEnv, box, script string, args ...string) {
	t.Helper()
	resp, err := e.box.Exec(ctx, &cbv1.ExecRequest{Box: box, Argv: append([]string{"sh", "-c", script, "sh"}, args...)})
	if err != nil || resp.GetExitCode() != 0 {
		t.Fatalf("exec %q: %v, %v", script, resp, err)
	}
}

// TestHostileBoxAnswers reads a file from a box whose stat and base64 have been replaced by a
// process inside it (a bind mount in the box's own mount namespace): each lie is answered
// invalid, naming what was wrong, and the API goes on serving.
func TestHostileBoxAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	e, ctx, token := hostileEnv(t, fakeEngineConfig(t))
	ctx = e.as(ctx, token)
	created, err := e.box.CreateBox(ctx, &cbv1.CreateBoxRequest{Name: "liar", Size: string(cocoonbox.SizeSmall)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	box := created.GetId()
	execOK(ctx, t, e, box, `printf hello > /root/f.txt`)
	if got, err := e.box.ReadFile(ctx, &cbv1.ReadFileRequest{Box: box, Path: "/root/f.txt"}); err != nil || string(got.GetContent()) != "hello" {
		t.Fatalf("honest read: %v, %v", got, err)
	}

	for _, tc := range []struct {
		tool, lie, want string
	}{
		{"stat", `echo "-1 644"`, `box answer: stat of /root/f.txt: size "-1" is not a byte count`},
		{"stat", `echo "5 644 extra"`, `box answer: stat of /root/f.txt: want "<size> <mode>"`},
		{"base64", `echo '!!not base64!!'`, `box answer: read of /root/f.txt: not base64`},
	} {
		bin := "/usr/bin/" + tc.tool
		execOK(ctx, t, e, box, `printf '#!/bin/sh\n%s\n' "$1" > /tmp/liar && chmod +x /tmp/liar && mount --bind /tmp/liar "$2"`, tc.lie, bin)
		_, err := e.box.ReadFile(ctx, &cbv1.ReadFileRequest{Box: box, Path: "/root/f.txt"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("read with a lying %s (%s): %v; want InvalidArgument containing %q", tc.tool, tc.lie, err, tc.want)
		}
		if _, err := e.box.GetBox(ctx, &cbv1.GetBoxRequest{Box: box}); err != nil {
			t.Fatalf("the API stopped serving after a lying %s: %v", tc.tool, err)
		}
		execOK(ctx, t, e, box, `umount `+bin)
	}
	if got, err := e.box.ReadFile(ctx, &cbv1.ReadFileRequest{Box: box, Path: "/root/f.txt"}); err != nil || string(got.GetContent()) != "hello" {
		t.Fatalf("honest read after the lies: %v, %v", got, err)
	}
}

// TestQuotas checks the per-user limits through the API: the box after the quota is
// RESOURCE_EXHAUSTED naming the limit (with a QuotaFailure, which the CLI exits 7 on), and
// deleting a box frees its place.
func TestQuotas(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := fakeEngineConfig(t)
	cfg.Quota = config.Quota{Boxes: 2}
	e, ctx, token := hostileEnv(t, cfg)
	own := e.as(ctx, token)
	var ids []string
	for _, name := range []string{"one", "two"} {
		b, err := e.box.CreateBox(own, &cbv1.CreateBoxRequest{Name: name, Size: string(cocoonbox.SizeSmall)})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		ids = append(ids, b.GetId())
	}
	_, err := e.box.CreateBox(own, &cbv1.CreateBoxRequest{Name: "three", Size: string(cocoonbox.SizeSmall)})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "quota: boxes per user (2) reached" {
		t.Fatalf("third box: %v; want RESOURCE_EXHAUSTED naming the limit", err)
	}
	if len(st.Details()) != 1 {
		t.Fatalf("third box: details %v; want one QuotaFailure", st.Details())
	}
	if _, ok := st.Details()[0].(*errdetails.QuotaFailure); !ok {
		t.Fatalf("third box: detail %T; want a QuotaFailure", st.Details()[0])
	}
	if _, err := e.box.DeleteBox(own, &cbv1.DeleteBoxRequest{Box: ids[1]}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := e.box.CreateBox(own, &cbv1.CreateBoxRequest{Name: "three", Size: string(cocoonbox.SizeSmall)}); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}

}

// TestViewerCannotWake hibernates a shared box and has its viewer look at it: the screenshot
// and the desktop are refused with the reason, and the box stays hibernated, in its workflow
// and in the engine. Its driver's look wakes it.
func TestViewerCannotWake(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := fakeEngineConfig(t)
	d, ctx, owner, eng := newBoxEnv(t, cfg, 4*time.Minute)
	svc := d.Boxes
	id := cocoonbox.NewBoxID()
	if _, err := svc.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "asleep", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	e := apiEnv{d: d}
	viewer, _ := e.user(ctx, t, "vic")
	if _, err := svc.Share(ctx, owner.ID, id, viewer.Name, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	// Without a seal: through the agent (this engine cannot export a disk) it would wake the
	// sandbox itself, for minutes while it retries against the fake's box, which has no agent.
	// What is checked here is that the viewer's looks do not wake it.
	v, err := svc.Get(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	p := v.Policy
	p.DurableHibernate = false
	if _, err := svc.SetPolicy(ctx, owner.ID, id, p); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatal(err)
	}
	want := "box " + string(id) + " is hibernated; a driver can wake it"
	_, err = svc.Screenshot(ctx, viewer.ID, id, 0)
	if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || cocoonbox.ErrorMessage(err) != want {
		t.Errorf("viewer's screenshot: %v; want conflict %q", err, want)
	}
	conn, err := svc.DialDesktop(ctx, viewer.ID, id, false)
	if err == nil {
		_ = conn.Close()
	}
	if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || cocoonbox.ErrorMessage(err) != want {
		t.Errorf("viewer's desktop: %v; want conflict %q", err, want)
	}
	v, err = svc.Get(ctx, viewer.ID, id)
	if err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("after the viewer's looks: %+v, %v; want hibernated", v, err)
	}
	if row, err := eng.Get(ctx, v.SandboxID); err != nil || !row.Hibernated {
		t.Fatalf("engine sandbox %s after the viewer's looks: %+v, %v; want hibernated", v.SandboxID, row, err)
	}
	// The owner (a driver) may wake it by looking; the fake's box has no agent to answer.
	if _, err := svc.Screenshot(ctx, owner.ID, id, 0); cocoonbox.ErrorCode(err) == cocoonbox.EConflict {
		t.Fatalf("owner's screenshot: %v; want the box woken", err)
	}
	if v, err := svc.Get(ctx, owner.ID, id); err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("after the owner's look: %+v, %v; want running", v, err)
	}
}
