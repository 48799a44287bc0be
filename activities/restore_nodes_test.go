package activities

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/s3server"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestSnapshotAndRestoreFollowNodes: with two engine nodes, a box on the node that is not the
// worker's own is snapshotted from that node's engine (the checkpoint lives there), and a
// restore goes where placement puts it, not to the worker's own engine: to the other node while
// the worker's own is draining, back to the own node when the other drains; a retried restore
// finds its sandbox on the node its lost try used.
func TestSnapshotAndRestoreFollowNodes(t *testing.T) {
	ctx := context.Background()
	const root = "root-token-nodes"
	own, other := nodeEngineServer(t, root), nodeEngineServer(t, root)
	now := time.Now()
	registered := []nodes.Node{
		{ID: "own", URL: own.URL, State: nodes.Active, MemoryMiB: 4096, HeartbeatAt: now},
		{ID: "other", URL: other.URL, State: nodes.Active, MemoryMiB: 4096, HeartbeatAt: now},
	}
	st := storetest.New(t)
	user, err := st.CreateUser(ctx, store.NewUser{Name: "nora"})
	if err != nil {
		t.Fatal(err)
	}
	box := cocoonbox.NewBoxID()
	if _, err := st.CreateBox(ctx, store.NewBox{ID: box, Owner: user.ID, Name: "placed", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	tokens := &memTokens{nodes: registered}
	client := sandbox.NewHTTP(own.URL, root, nil)
	a := &Snapshots{Client: client, Tokens: tokens, Blobs: bucket(t), Store: storeSnapshots{st}, Template: "base",
		PollInterval: 10 * time.Millisecond, Node: "own",
		Nodes: func(context.Context) ([]nodes.Node, error) { return registered, nil }}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)

	// The box runs on the other node, with a file in it.
	otherClient := sandbox.NewHTTP(other.URL, root, nil)
	sb, err := otherClient.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: "small", ClaimRef: ClaimRef(box, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherClient.Exec(ctx, sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"write", "/root/notes", "kept"}}); err != nil {
		t.Fatal(err)
	}
	if err := tokens.PutSandboxToken(ctx, string(box), sandbox.SandboxRef{ID: sb.ID, Token: sb.Token, Node: "other"}); err != nil {
		t.Fatal(err)
	}

	snapID := cocoonbox.NewSnapshotID()
	if _, err := env.ExecuteActivity(a.BeginSnapshot, BeginSnapshotInput{BoxID: box, SnapshotID: snapID}); err != nil {
		t.Fatal(err)
	}
	v, err := env.ExecuteActivity(a.UploadSnapshot, UploadSnapshotInput{BoxID: box, SnapshotID: snapID, SandboxID: sb.ID})
	if err != nil {
		t.Fatalf("snapshot of a box on another node than the worker's: %v", err)
	}
	var up UploadSnapshotResult
	if err := v.Get(&up); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.CompleteSnapshot, CompleteSnapshotInput{SnapshotID: snapID, UploadSnapshotResult: up}); err != nil {
		t.Fatal(err)
	}
	if n := len(checkpoints(t, otherClient)); n != 0 {
		t.Errorf("the snapshot left %d checkpoints on the box's node", n)
	}

	restore := func(attempt int) RestoreSnapshotResult {
		t.Helper()
		v, err := env.ExecuteActivity(a.RestoreSnapshot, RestoreSnapshotInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: attempt})
		if err != nil {
			t.Fatalf("restore attempt %d: %v", attempt, err)
		}
		var res RestoreSnapshotResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The worker's own node drains: the restore lands on the other one.
	registered[0].State = nodes.Draining
	first := restore(2)
	if ref := tokens.stored(string(box)); ref.ID != first.SandboxID || ref.Node != "other" {
		t.Fatalf("restored sandbox recorded as %+v, want %s on node other", ref, first.SandboxID)
	}
	restored := sandboxOn(t, otherClient, first.SandboxID)
	if out, err := otherClient.Exec(ctx, restored, sandbox.ExecRequest{Argv: []string{"cat", "/root/notes"}}); err != nil || out.Stdout != "kept" {
		t.Fatalf("the restored box's file: %q, %v", out.Stdout, err)
	}
	if n := len(sandboxesOf(t, client)); n != 0 {
		t.Fatalf("the draining own engine holds %d sandboxes, want none", n)
	}

	// The other node drains now: a retry of the same attempt still finds its sandbox there, and
	// the next attempt goes to the own node.
	registered[0].State, registered[1].State = nodes.Active, nodes.Draining
	if again := restore(2); again.SandboxID != first.SandboxID {
		t.Fatalf("a retried restore made %s, want %s adopted", again.SandboxID, first.SandboxID)
	}
	second := restore(3)
	if ref := tokens.stored(string(box)); ref.ID != second.SandboxID || ref.Node != "own" {
		t.Fatalf("restored sandbox recorded as %+v, want %s on node own", ref, second.SandboxID)
	}
	for _, c := range []*sandbox.HTTP{client, otherClient} {
		if n := len(checkpoints(t, c)); n != 0 {
			t.Errorf("restores left %d checkpoints on an engine", n)
		}
	}
}

// nodeEngineServer is a real engine over the fake runtime, serving HTTP until the test ends.
func nodeEngineServer(t *testing.T, root string) *httptest.Server {
	t.Helper()
	rt := enginetest.New()
	t.Cleanup(rt.Close)
	rootfs := t.TempDir()
	e, err := engine.New(engine.Options{Dir: t.TempDir(), Runtime: rt, RootToken: root, OwnerAddr: "127.0.0.1:7777",
		Images: func(string) (string, error) { return rootfs, nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		_ = e.Close()
	})
	return srv
}

// bucket is an empty bucket on a real S3 server of this test's own.
func bucket(t *testing.T) objstore.Store {
	t.Helper()
	ctx := t.Context()
	const access, secret = "nodesaccess", "nodessecret-nodessecret"
	srv, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: access, SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	b, err := objstore.NewS3(ctx, objstore.Config{Endpoint: srv.Endpoint(), Region: s3server.Region, Bucket: "snapshots",
		AccessKey: access, SecretKey: secret, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// storeSnapshots is the store as a SnapshotStore, as the worker wires it.
type storeSnapshots struct{ *store.Store }

func (s storeSnapshots) BeginSnapshot(ctx context.Context, sn cocoonbox.Snapshot) (cocoonbox.Snapshot, error) {
	return s.Store.BeginSnapshot(ctx, store.NewSnapshot{ID: sn.ID, BoxID: sn.BoxID, ParentID: sn.ParentID,
		BaseID: sn.BaseID, ObjectKey: sn.ObjectKey, IndexKey: sn.IndexKey})
}

func checkpoints(t *testing.T, c *sandbox.HTTP) []sandbox.Checkpoint {
	t.Helper()
	cks, err := c.ListCheckpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cks
}

func sandboxesOf(t *testing.T, c *sandbox.HTTP) []sandbox.Sandbox {
	t.Helper()
	rows, err := c.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// sandboxOn is sandbox id of c's engine with its token, or the test fails.
func sandboxOn(t *testing.T, c *sandbox.HTTP, id string) sandbox.SandboxRef {
	t.Helper()
	sb, err := c.Get(context.Background(), id)
	if err != nil || !strings.HasPrefix(sb.ID, "sb") {
		t.Fatalf("sandbox %s on the engine: %+v, %v", id, sb, err)
	}
	return sandbox.SandboxRef{ID: sb.ID, Token: sb.Token}
}

// TestPlaceRestoreTakesChosenNode: a restore told the node PlaceRestore chose goes there while
// that node still takes boxes, even where placement would now pick another; a chosen node that
// began to drain meanwhile, or that is not registered, is placed again by the rule.
func TestPlaceRestoreTakesChosenNode(t *testing.T) {
	now := time.Now()
	registered := []nodes.Node{
		{ID: "roomy", URL: "http://roomy:7777", State: nodes.Active, MemoryMiB: 8192, HeartbeatAt: now},
		{ID: "tight", URL: "http://tight:7777", State: nodes.Active, MemoryMiB: 2048, CommittedMiB: 1024, HeartbeatAt: now},
		{ID: "leaving", URL: "http://leaving:7777", State: nodes.Draining, MemoryMiB: 8192, HeartbeatAt: now},
	}
	a := &Snapshots{Client: sandbox.NewHTTP("http://own:7777", "root", nil), Template: "base"}
	req := nodes.Request{Template: "base", Size: cocoonbox.SizeSmall, Net: "none"}
	for _, c := range []struct{ chosen, want string }{
		{"tight", "tight"},   // chosen, though roomy has more room now
		{"", "roomy"},        // none chosen: the rule
		{"leaving", "roomy"}, // draining since it was chosen
		{"gone", "roomy"},    // no longer registered
	} {
		eng, err := a.placeRestore(registered, c.chosen, req)
		if err != nil || eng.node != c.want {
			t.Errorf("chosen %q: placed on %q (%v), want %q", c.chosen, eng.node, err, c.want)
		}
	}
}
