package devstack_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/workflows"
)

// writeTree fills /root/tree with what a snapshot must carry exactly: a large file, a sparse
// file, symlinks (one dangling), a hard link, odd permissions and owners, an old mtime and empty
// directories.
const writeTree = `set -e
mkdir -p /root/tree/empty /root/tree/dir/sub /root/tree/dir/emptier
head -c 48M /dev/urandom > /root/tree/big
truncate -s 256M /root/tree/sparse
printf middle | dd of=/root/tree/sparse bs=1 seek=100000000 conv=notrunc status=none
printf secret > /root/tree/dir/private && chmod 600 /root/tree/dir/private
printf '#!/bin/sh\necho hi\n' > /root/tree/dir/run.sh && chmod 4755 /root/tree/dir/run.sh
chown 1000:1000 /root/tree/dir/run.sh
chmod 1777 /root/tree/dir/sub
chmod 700 /root/tree/dir/emptier
ln -s ../big /root/tree/dir/link
ln -s /nowhere /root/tree/dangling
ln /root/tree/dir/private /root/tree/hard
touch -h -d '2001-02-03 04:05:06' /root/tree/dir/run.sh /root/tree/dangling
`

// describeTree prints every entry's path, type, mode, owner, size, link target and link count,
// the mtimes that were set explicitly, then the sha256 of every regular file: two trees are the
// same when this is. Other mtimes are left out: gVisor's sentry keeps its own sub-second times,
// a few milliseconds off what its gofer wrote to the host disk that a snapshot copies.
const describeTree = `cd /root/tree && find . -printf '%p %y %m %U:%G %s %l %n\n' | sort &&
find . ! -newermt 2002-01-01 -printf '%p %T@\n' | sort &&
find . -type f -exec sha256sum {} + | sort`

// TestSnapshotRoundTrip is the acceptance check for work that survives node loss by default: a
// tree written into a box is sealed into a snapshot by the hibernate alone (in the background,
// the hibernate answering first), the box's sandbox is destroyed behind the workflow's back
// while it sleeps, and the wake rebuilds the box from that snapshot with every file's content,
// mode, owner and link intact and the sparse file still sparse, and says so.
func TestSnapshotRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, writeTree)
	before := mustExec(ctx, t, eng, ref, describeTree)

	st, err := d.Boxes.Hibernate(ctx, owner.ID, id)
	if err != nil || st.State != cocoonbox.BoxStateHibernated || st.Seal != workflows.SealSealing {
		t.Fatalf("hibernate: %+v, %v; want hibernated and sealing", st, err)
	}
	st = waitSealed(ctx, t, d, owner.ID, id)
	snap, err := d.Store.SnapshotByID(ctx, st.LastSnapshot)
	if err != nil || snap.State != cocoonbox.SnapshotComplete || snap.Bytes == 0 || len(snap.SHA256) != 64 || snap.Files < 10 {
		t.Fatalf("the seal's snapshot = %+v, %v; want complete with its figures", snap, err)
	}
	checkStored(ctx, t, d, snap)
	if row, err := eng.Get(ctx, ref.ID); err != nil || !row.Hibernated {
		t.Fatalf("the sealed sandbox: %+v, %v; want it still asleep", row, err)
	}

	// The node loses the box: its sandbox (memory image and disk) is gone.
	if err := eng.Release(ctx, sandbox.SandboxRef{ID: ref.ID}); err != nil {
		t.Fatal(err)
	}
	st, err = d.Boxes.Wake(ctx, owner.ID, id)
	if err != nil || st.State != cocoonbox.BoxStateRunning || st.SandboxID == ref.ID || st.SandboxID == "" {
		t.Fatalf("wake after losing the sandbox: %+v, %v; want running on a new sandbox", st, err)
	}
	if st.LastSnapshot != snap.ID || st.RestoredFrom.SnapshotID != snap.ID || !st.RestoredFrom.TakenAt.Equal(snap.CreatedAt) {
		t.Fatalf("rebuilt from %q (restored from %+v), want snapshot %s taken %s", st.LastSnapshot, st.RestoredFrom, snap.ID, snap.CreatedAt)
	}
	if !hasEvent(ctx, t, d, owner.ID, id, "restored_after_loss", snap.ID) {
		t.Fatal("no restored_after_loss event names the snapshot")
	}
	ref2 := sandboxRef(ctx, t, eng, st.SandboxID)
	if after := mustExec(ctx, t, eng, ref2, describeTree); after != before {
		t.Fatalf("the rebuilt tree differs:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// 256 MiB apparent, one page of data: a restore that filled the holes would show here. Seen
	// on the host, in the new box's disk layer: inside, gVisor reports blocks as size/512.
	var fi syscall.Stat_t
	sparse := filepath.Join(d.Home(), "engine", "boxes", st.SandboxID, "vol", "disk", "root", "tree", "sparse")
	if err := syscall.Stat(sparse, &fi); err != nil || fi.Blocks > 2048 {
		t.Fatalf("the sparse file after restore: %d blocks allocated (%v); its holes were filled", fi.Blocks, err)
	}
	if rows, err := eng.List(ctx, ""); err != nil || len(rows) != 1 || rows[0].ID != st.SandboxID {
		t.Fatalf("engine sandboxes: %+v, %v; want only %s", rows, err, st.SandboxID)
	}
	if cks, err := eng.ListCheckpoints(ctx); err != nil || len(cks) != 0 {
		t.Fatalf("checkpoints left on the engine: %+v, %v", cks, err)
	}
}

// TestSnapshotSurvivesKilledWorker: the worker is SIGKILLed in the middle of an upload. The
// retry on a new worker aborts the orphaned multipart upload and uploads again, the snapshot
// completes once, the bucket holds no incomplete upload, and the snapshot before it is intact.
func TestSnapshotSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.NoWorker = true
	d, ctx, owner, eng := newBoxEnv(t, cfg, 5*time.Minute)
	wcfg := workerConfig(d)
	wcfg.SnapshotUploadMiBps = 16 // slow enough to be caught mid-upload
	first := startChildWorker(t, wcfg)

	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, "echo one > /root/one")
	prev, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	mustExec(ctx, t, eng, ref, "head -c 96M /dev/urandom > /root/big")

	type result struct {
		res workflows.SnapshotResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := d.Boxes.Snapshot(ctx, owner.ID, id)
		done <- result{res, err}
	}()
	prefix := "boxes/" + string(id) + "/"
	err = testutil.Poll(ctx, time.Minute, func() error {
		select {
		case r := <-done:
			t.Fatalf("the snapshot finished before the worker could be killed: %+v, %v", r.res, r.err)
		default:
		}
		if ups, err := d.Blobs.ListIncomplete(ctx, prefix); err != nil || len(ups) == 0 {
			return errors.New("no multipart upload yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first.kill()
	t.Log("killed the worker in the middle of the upload")
	wcfg.SnapshotUploadMiBps = 0
	startChildWorker(t, wcfg)

	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the snapshot did not complete after the worker restarted")
	}
	if r.err != nil || r.res.Snapshot.State != cocoonbox.SnapshotComplete {
		t.Fatalf("snapshot after the kill: %+v, %v", r.res, r.err)
	}
	if r.res.Snapshot.ParentID != prev.Snapshot.ID {
		t.Fatalf("parent = %q, want the first snapshot %s", r.res.Snapshot.ParentID, prev.Snapshot.ID)
	}
	checkStored(ctx, t, d, r.res.Snapshot)
	checkStored(ctx, t, d, prev.Snapshot) // the earlier snapshot is untouched
	if ups, err := d.Blobs.ListIncomplete(ctx, ""); err != nil || len(ups) != 0 {
		t.Fatalf("incomplete uploads left in the bucket: %v, %v", ups, err)
	}
	rows, err := d.Store.ListSnapshots(ctx, id)
	if err != nil || len(rows) != 2 {
		t.Fatalf("snapshot rows: %+v, %v; want exactly 2", rows, err)
	}
	for _, row := range rows {
		if row.State != cocoonbox.SnapshotComplete {
			t.Fatalf("snapshot row %+v is not complete", row)
		}
	}
	if n := uploadAttempt(ctx, t, d, r.res.Snapshot.ID); n < 2 {
		t.Fatalf("the upload completed on attempt %d; the kill did not interrupt it", n)
	}
	if cks, err := eng.ListCheckpoints(ctx); err != nil || len(cks) != 0 {
		t.Fatalf("checkpoints left on the engine: %+v, %v", cks, err)
	}
}

// TestSnapshotExternalS3AndCorruption runs snapshots against a separately started versitygw,
// chosen by configuration only: a restore brings back the snapshotted state, and one byte
// flipped in the stored object is caught at restore with an error naming the snapshot, while
// the box keeps its current state.
func TestSnapshotExternalS3AndCorruption(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	s3dir := t.TempDir()
	cfg := boxConfig(t)
	cfg.S3 = runVersitygw(t, s3dir)
	d, ctx, owner, eng := newBoxEnv(t, cfg, 5*time.Minute)
	if _, err := os.Stat(filepath.Join(d.Home(), "s3")); !os.IsNotExist(err) {
		t.Fatalf("an embedded S3 server started besides the configured one: %v", err)
	}
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	// 20 MiB that does not compress: the object goes up in several parts, as real ones do.
	mustExec(ctx, t, eng, ref, "echo kept > /root/notes && head -c 20M /dev/urandom > /root/noise")
	res, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snap := res.Snapshot
	object := filepath.Join(s3dir, "data", cfg.S3.Bucket, snap.ObjectKey)
	if fi, err := os.Stat(object); err != nil || fi.Size() != snap.Bytes {
		t.Fatalf("object in the external server's directory: %v, %v; want %d bytes", fi, err, snap.Bytes)
	}

	mustExec(ctx, t, eng, ref, "echo changed > /root/notes")
	st, err := d.Boxes.Restore(ctx, owner.ID, id, snap.ID)
	if err != nil || st.State != cocoonbox.BoxStateRunning || st.SandboxID == ref.ID {
		t.Fatalf("restore: %+v, %v", st, err)
	}
	ref = sandboxRef(ctx, t, eng, st.SandboxID)
	if got := mustExec(ctx, t, eng, ref, "cat /root/notes"); got != "kept\n" {
		t.Fatalf("after restore /root/notes = %q, want the snapshotted content", got)
	}
	// The restore answers before the replaced sandbox's release ends.
	testutil.EventuallyReports(t, testutil.WaitShort, "the replaced sandbox released after the restore", func() (bool, string) {
		rows, err := eng.List(ctx, "")
		return err == nil && len(rows) == 1, fmt.Sprintf("%+v, %v", rows, err)
	})

	mustExec(ctx, t, eng, ref, "echo current > /root/notes")
	flipByte(t, object, snap.Bytes/2)
	t0 := time.Now()
	_, err = d.Boxes.Restore(ctx, owner.ID, id, snap.ID)
	t.Logf("corruption detected in %s: %v", time.Since(t0).Round(time.Millisecond), err)
	if cocoonbox.ErrorCode(err) != cocoonbox.ECorrupt || !strings.Contains(err.Error(), snap.ID) {
		t.Fatalf("restore of a corrupted snapshot: %v; want a corrupt error naming %s", err, snap.ID)
	}
	st, err = d.Boxes.Get(ctx, owner.ID, id)
	if err != nil || st.State != cocoonbox.BoxStateRunning || st.SandboxID != ref.ID {
		t.Fatalf("box after the failed restore: %+v, %v; want running on %s", st, err, ref.ID)
	}
	if got := mustExec(ctx, t, eng, ref, "cat /root/notes"); got != "current\n" {
		t.Fatalf("after the failed restore /root/notes = %q, want the box's current state", got)
	}
	if rows, err := eng.List(ctx, ""); err != nil || len(rows) != 1 {
		t.Fatalf("engine sandboxes after the failed restore: %+v, %v", rows, err)
	}
	if cks, err := eng.ListCheckpoints(ctx); err != nil || len(cks) != 0 {
		t.Fatalf("the refused import left checkpoints: %+v, %v", cks, err)
	}
}

// TestSnapshotRetention: with a policy keeping 2, the oldest unpinned snapshots go (object,
// manifest and row) once more than 2 of them are held as bases of kept ones, the oldest kept
// one having been compacted into a full snapshot first; a pinned one stays, the newest is never
// touched; the durable-hibernate policy snapshots before hibernating; delete with purge removes
// everything.
func TestSnapshotRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	st, err := d.Boxes.Get(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Policy
	p.KeepSnapshots = 2
	if _, err := d.Boxes.SetPolicy(ctx, owner.ID, id, p); err != nil {
		t.Fatal(err)
	}
	var snaps []cocoonbox.Snapshot
	for i := range 6 {
		mustExec(ctx, t, eng, ref, "echo "+strconv.Itoa(i)+" > /root/n")
		res, err := d.Boxes.Snapshot(ctx, owner.ID, id)
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		snaps = append(snaps, res.Snapshot)
		if i == 0 {
			if err := d.Boxes.PinSnapshot(ctx, owner.ID, id, res.Snapshot.ID, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	rows, err := d.Boxes.ListSnapshots(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.ID)
	}
	// The fourth and fifth snapshots held the second and third (the bases the kept ones are built
	// on, no more than keep); the sixth gave up three, so the fifth was compacted and they went.
	want := []string{snaps[5].ID, snaps[4].ID, snaps[0].ID}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("snapshots kept: %v, want %v (newest 2 and the pinned one)", got, want)
	}
	for i, r := range rows {
		if wantBase := map[int]string{0: snaps[4].ID}[i]; r.BaseID != wantBase {
			t.Errorf("snapshot %s has base %q, want %q", r.ID, r.BaseID, wantBase)
		}
	}
	for _, s := range []cocoonbox.Snapshot{snaps[0], snaps[4], snaps[5]} {
		row, err := d.Store.SnapshotByID(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkStored(ctx, t, d, row)
	}
	for _, s := range snaps[1:4] {
		for _, key := range []string{s.ObjectKey, activities.SnapshotManifestKey(id, s.ID), activities.SnapshotIndexKey(id, s.ID)} {
			if _, err := d.Blobs.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("pruned %s still stored: %v", key, err)
			}
		}
	}
	if err := d.Boxes.PinSnapshot(ctx, owner.ID, id, "sn_0000000000000000", true); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("pin an unknown snapshot: %v, want not found", err)
	}

	// Durable hibernate: a hibernate seals the box, which retention then counts.
	p.DurableHibernate = true
	if _, err := d.Boxes.SetPolicy(ctx, owner.ID, id, p); err != nil {
		t.Fatal(err)
	}
	if st, err = d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("durable hibernate: %+v, %v", st, err)
	}
	if st = waitSealed(ctx, t, d, owner.ID, id); st.LastSnapshot == snaps[5].ID || st.LastSnapshot == "" {
		t.Fatalf("durable hibernate: %+v; want hibernated after a new snapshot", st)
	}
	if s, err := d.Store.LatestSnapshot(ctx, id); err != nil || s.ID != st.LastSnapshot {
		t.Fatalf("newest snapshot after durable hibernate: %+v, %v; want %s", s, err, st.LastSnapshot)
	}
	want = []string{st.LastSnapshot, snaps[5].ID, snaps[4].ID, snaps[0].ID}

	if _, err := d.Boxes.DeleteWith(ctx, owner.ID, id, workflows.DeleteInput{PurgeSnapshots: true}); err != nil {
		t.Fatal(err)
	}
	if rows, err := d.Store.ListSnapshots(ctx, id); err != nil || len(rows) != 0 {
		t.Fatalf("rows after delete with purge: %+v, %v", rows, err)
	}
	for _, s := range want {
		for _, key := range []string{activities.SnapshotObjectKey(id, s), activities.SnapshotFullKey(id, s), activities.SnapshotIndexKey(id, s)} {
			if _, err := d.Blobs.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("%s after delete with purge: %v", key, err)
			}
		}
	}
}

// waitSealed waits until the box's background seal is verified, and answers its status.
func waitSealed(ctx context.Context, t *testing.T, d *devstack.Dev, owner string, id cocoonbox.BoxID) boxsvc.View {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := d.Boxes.Get(ctx, owner, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Seal == workflows.SealSealed {
			return st
		}
		if st.Seal == "" || time.Now().After(deadline) {
			t.Fatalf("box %s not sealed: %+v", id, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hasEvent reports whether the box's events hold one of kind whose detail mentions what.
func hasEvent(ctx context.Context, t *testing.T, d *devstack.Dev, owner string, id cocoonbox.BoxID, kind, what string) bool {
	t.Helper()
	events, err := d.Boxes.ListEvents(ctx, owner, id, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Action == "box."+kind && strings.Contains(string(e.Detail), what) {
			return true
		}
	}
	return false
}

// TestLostBoxIsNotRecreatedEmpty: a box whose sandbox is lost before it ever had a snapshot
// is not brought back empty behind its owner's back; it fails as lost, and only recreate starts
// it again, from the template.
func TestLostBoxIsNotRecreatedEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, "echo work > /root/work")
	if err := eng.Release(ctx, sandbox.SandboxRef{ID: ref.ID}); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || st.SandboxID != "" {
		t.Fatalf("hibernate of a lost sandbox: %+v, %v", st, err)
	}
	st, err := d.Boxes.Wake(ctx, owner.ID, id)
	if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("wake of a lost box: %v, want a conflict saying lost", err)
	}
	if st, err = d.Boxes.Get(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateFailed ||
		!strings.HasPrefix(st.LastError, "lost:") || st.SandboxID != "" {
		t.Fatalf("lost box: %+v, %v; want failed, lost, no sandbox", st, err)
	}
	if !hasEvent(ctx, t, d, owner.ID, id, "lost", "no snapshot") {
		t.Fatal("no lost event")
	}
	if rows, err := eng.List(ctx, ""); err != nil || len(rows) != 0 {
		t.Fatalf("engine sandboxes of a lost box: %+v, %v; want none", rows, err)
	}
	st, err = d.Boxes.Recreate(ctx, owner.ID, id)
	if err != nil || st.State != cocoonbox.BoxStateRunning || st.SandboxID == "" || st.LastError != "" {
		t.Fatalf("recreate: %+v, %v", st, err)
	}
	ref = sandboxRef(ctx, t, eng, st.SandboxID)
	if out := mustExec(ctx, t, eng, ref, "cat /root/work 2>/dev/null || echo empty"); out != "empty\n" {
		t.Fatalf("the recreated box has %q; want it empty, from the template", out)
	}
	if _, err := d.Boxes.Recreate(ctx, owner.ID, id); cocoonbox.ErrorCode(err) != cocoonbox.EConflict {
		t.Fatalf("recreate of a running box: %v, want conflict", err)
	}
}

// createBox creates a running box and returns it with its sandbox's ref (token from the engine).
func createBox(ctx context.Context, t *testing.T, d *devstack.Dev, owner string, eng *sandbox.HTTP) (cocoonbox.BoxID, sandbox.SandboxRef) {
	t.Helper()
	id := cocoonbox.NewBoxID()
	st, err := d.Boxes.Create(ctx, owner, boxsvc.CreateRequest{ID: id, Name: "snap", Size: cocoonbox.SizeSmall})
	if err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create: %+v, %v", st, err)
	}
	return id, sandboxRef(ctx, t, eng, st.SandboxID)
}

// sandboxRef reads a sandbox's token with the engine's root token.
func sandboxRef(ctx context.Context, t *testing.T, eng *sandbox.HTTP, id string) sandbox.SandboxRef {
	t.Helper()
	row, err := eng.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.SandboxRef{ID: id, Token: row.Token}
}

// mustExec runs a shell script in the sandbox and returns its stdout; any failure ends the test.
func mustExec(ctx context.Context, t *testing.T, eng *sandbox.HTTP, ref sandbox.SandboxRef, script string) string {
	t.Helper()
	res, err := eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutSeconds: 120})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q: %+v, %v", script, res, err)
	}
	return res.Stdout
}

// checkStored reads a snapshot's object back and checks it against its row, and its manifest.
// The manifest keeps the parent it was taken on; the row forgets a parent retention deleted.
func checkStored(ctx context.Context, t *testing.T, d *devstack.Dev, s cocoonbox.Snapshot) {
	t.Helper()
	row, err := d.Store.SnapshotByID(ctx, s.ID)
	if err != nil || row.State != cocoonbox.SnapshotComplete || row.SHA256 != s.SHA256 {
		t.Fatalf("row of %s: %+v, %v", s.ID, row, err)
	}
	rc, err := d.Blobs.Get(ctx, row.ObjectKey)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	_ = rc.Close()
	if err != nil || n != row.Bytes || hex.EncodeToString(h.Sum(nil)) != row.SHA256 {
		t.Fatalf("object of %s: %d bytes (%v), sha256 %x; row says %d, %s", s.ID, n, err, h.Sum(nil), row.Bytes, row.SHA256)
	}
	rc, err = d.Blobs.Get(ctx, activities.SnapshotManifestKey(s.BoxID, s.ID))
	if err != nil {
		t.Fatalf("manifest of %s: %v", s.ID, err)
	}
	var m snapshot.Manifest
	err = json.NewDecoder(rc).Decode(&m)
	_ = rc.Close()
	if err != nil || m.SnapshotID != s.ID || m.BoxID != string(s.BoxID) || m.SHA256 != row.SHA256 ||
		m.Bytes != row.Bytes || m.Files != row.Files || row.ParentID != "" && m.ParentID != row.ParentID {
		t.Fatalf("manifest of %s: %+v, %v; row %+v", s.ID, m, err, row)
	}
}

// uploadAttempt is the attempt on which the snapshot's UploadSnapshot activity completed.
func uploadAttempt(ctx context.Context, t *testing.T, d *devstack.Dev, snapshotID string) int32 {
	t.Helper()
	it := d.Temporal.GetWorkflowHistory(ctx, workflows.SnapshotWorkflowID(snapshotID), "", false, 0)
	scheduled := map[int64]string{}
	var attempt int32
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == "UploadSnapshot" {
			attempt = a.GetAttempt()
		}
	}
	return attempt
}

// flipByte inverts one byte of a file in place.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
