package activities

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

// noSnapshots is a SnapshotStore of a box that has never been snapshotted.
type noSnapshots struct{ SnapshotStore }

func (noSnapshots) LatestSnapshot(context.Context, cocoonbox.BoxID) (cocoonbox.Snapshot, error) {
	return cocoonbox.Snapshot{}, cocoonbox.Errorf(cocoonbox.ENotFound, "no snapshot")
}

// SnapshotByID is the one being begun, uploading.
func (noSnapshots) SnapshotByID(_ context.Context, id string) (cocoonbox.Snapshot, error) {
	return cocoonbox.Snapshot{ID: id, BoxID: "bx_0123456789abcdef", State: cocoonbox.SnapshotUploading}, nil
}

// TestSnapshotActivitiesWithoutDiskExport: against an engine with no disk export (upstream
// sandboxd, here the fake) and no agent link to take the snapshot through the box's agent
// instead, a snapshot fails at once with a reason, while a box with no snapshot
// to restore gets NotFound, which sends the workflow to claim from the template instead.
func TestSnapshotActivitiesWithoutDiskExport(t *testing.T) {
	f := sandboxtest.New(t, sandboxtest.Options{RootToken: "root"})
	a := &Snapshots{Client: f.Client("root"), Tokens: &memTokens{}, Store: noSnapshots{}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	box := cocoonbox.BoxID("bx_0123456789abcdef")

	_, err := env.ExecuteActivity(a.UploadSnapshot, UploadSnapshotInput{BoxID: box, SnapshotID: "sn_0123456789abcdef", SandboxID: "sb_1"})
	if errorType(err) != ErrTypeInvalidArgument || !strings.Contains(err.Error(), "cannot export") {
		t.Fatalf("upload without disk export: %v, want InvalidArgument saying why", err)
	}
	_, err = env.ExecuteActivity(a.RestoreSnapshot, RestoreSnapshotInput{BoxID: box, Attempt: 2})
	if errorType(err) != ErrTypeNotFound {
		t.Fatalf("restore of a box without snapshots: %v, want NotFound", err)
	}
	_, err = env.ExecuteActivity(a.RestoreSnapshot, RestoreSnapshotInput{BoxID: box, SnapshotID: "latest", Attempt: 2})
	if errorType(err) != ErrTypeInvalidArgument || !strings.Contains(err.Error(), "snapshot_id") {
		t.Fatalf("restore of a malformed snapshot ID: %v, want InvalidArgument naming snapshot_id", err)
	}
	_, err = env.ExecuteActivity(a.BeginSnapshot, BeginSnapshotInput{BoxID: box, SnapshotID: "sn_x"})
	if errorType(err) != ErrTypeInvalidArgument {
		t.Fatalf("begin with a malformed snapshot ID: %v, want InvalidArgument", err)
	}
}

// TestThrottle: a capped stream keeps to its rate and passes its bytes through unchanged.
func TestThrottle(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 300<<10)
	start := time.Now()
	got, err := io.ReadAll(throttle(context.Background(), bytes.NewReader(data), 1<<20))
	took := time.Since(start)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("throttled read: %d bytes, %v", len(got), err)
	}
	// 300 KiB at 1 MiB/s is about 0.29 s; well under it means the cap does nothing.
	if took < 200*time.Millisecond {
		t.Fatalf("300 KiB at 1 MiB/s took %s", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := io.ReadAll(throttle(ctx, bytes.NewReader(data), 1<<10)); err == nil {
		t.Fatal("a throttled read went on after its context ended")
	}
}

// errorType is the ApplicationError type in err's chain, or "".
func errorType(err error) string {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return app.Type()
	}
	return ""
}

// uploadingSnapshot is a SnapshotStore holding one uploading snapshot, recording its failure.
type uploadingSnapshot struct {
	noSnapshots
	failed bool
}

func (s *uploadingSnapshot) FailSnapshot(context.Context, string) error {
	s.failed = true
	return nil
}

// downBlobs is a snapshot store that does not answer.
type downBlobs struct{ objstore.Store }

var errStoreDown = &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "snapshot store (S3 at 127.0.0.1:1) is not answering"}

func (downBlobs) AbortIncomplete(context.Context, string, time.Duration) (int, error) {
	return 0, errStoreDown
}
func (downBlobs) Delete(context.Context, string) error { return errStoreDown }

// TestFailSnapshotWithStoreDown: a snapshot given up because the store is down is marked failed
// although its clean-up cannot reach the store either (retention removes its objects later), so
// the row is never left uploading.
func TestFailSnapshotWithStoreDown(t *testing.T) {
	f := sandboxtest.New(t, sandboxtest.Options{RootToken: "root"})
	rows := &uploadingSnapshot{}
	a := &Snapshots{Client: f.Client("root"), Tokens: &memTokens{}, Store: rows, Blobs: downBlobs{}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	_, err := env.ExecuteActivity(a.FailSnapshot, SnapshotRef{BoxID: "bx_0123456789abcdef", SnapshotID: "sn_0123456789abcdef"})
	if err != nil {
		t.Fatalf("fail snapshot with the store down: %v", err)
	}
	if !rows.failed {
		t.Error("the row was not marked failed")
	}
}
