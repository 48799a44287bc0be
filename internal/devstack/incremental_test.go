package devstack_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/objstore"
)

// TestIncrementalSnapshots is the acceptance check for incremental snapshots, on the real
// engine, S3 and database: after a full snapshot, each one stores only what changed (a 10 MiB
// change uploads under 12 MiB), a chain of five restores byte-exact, retention holds the bases a
// kept snapshot needs, and once too many are held compacts the oldest kept one into a full
// snapshot, after which the bases and their objects are gone and the chain still restores.
func TestIncrementalSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 8*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	keep := func(n int) {
		t.Helper()
		v, err := d.Boxes.Get(ctx, owner.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		p := v.Policy
		p.KeepSnapshots = n
		if _, err := d.Boxes.SetPolicy(ctx, owner.ID, id, p); err != nil {
			t.Fatal(err)
		}
	}
	keep(5)
	mustExec(ctx, t, eng, ref, writeTree)
	rounds := []string{
		"", // the full snapshot of the tree
		"head -c 10M /dev/urandom > /root/tree/ten && rm /root/tree/dir/private && chmod 640 /root/tree/dir/run.sh",
		"rm -r /root/tree/dir/sub && ln -sfn big /root/tree/dangling && mkdir /root/tree/new && echo x > /root/tree/new/x",
		"printf changed | dd of=/root/tree/sparse bs=1 seek=200000000 conv=notrunc status=none && touch -d '2001-01-01' /root/tree/empty",
		"rm -r /root/tree/new && mkdir -p /root/tree/dir/sub && echo back > /root/tree/dir/sub/again",
	}
	var snaps []cocoonbox.Snapshot
	take := func(change string) (cocoonbox.Snapshot, string) {
		t.Helper()
		if change != "" {
			mustExec(ctx, t, eng, ref, change)
		}
		want := mustExec(ctx, t, eng, ref, describeTree)
		res, err := d.Boxes.Snapshot(ctx, owner.ID, id)
		if err != nil {
			t.Fatalf("snapshot after %q: %v", change, err)
		}
		s, err := d.Store.SnapshotByID(ctx, res.Snapshot.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkStored(ctx, t, d, s)
		if _, err := d.Blobs.Stat(ctx, s.IndexKey); err != nil {
			t.Fatalf("index of %s: %v", s.ID, err)
		}
		return s, want
	}
	var wants []string
	for i, change := range rounds {
		s, want := take(change)
		switch {
		case i == 0 && s.BaseID != "":
			t.Fatalf("the first snapshot has base %s, want none", s.BaseID)
		case i > 0 && (s.BaseID != snaps[i-1].ID || s.Depth != i):
			t.Fatalf("snapshot %d: base %q depth %d, want %s and %d", i+1, s.BaseID, s.Depth, snaps[i-1].ID, i)
		}
		t.Logf("snapshot %d: %d bytes, %d entries (%s)", i+1, s.Bytes, s.Files, change)
		snaps, wants = append(snaps, s), append(wants, want)
	}
	if full, ten := snaps[0].Bytes, snaps[1].Bytes; ten >= 12<<20 || ten < 10<<20 || full < 48<<20 {
		t.Fatalf("the full snapshot is %d bytes and the one after a 10 MiB change %d: want at least 48 MiB, and 10 to 12 MiB", full, ten)
	}

	// The chain of five restores byte-exact, on a new sandbox.
	restoreAndCompare := func(s cocoonbox.Snapshot, want string) {
		t.Helper()
		v, err := d.Boxes.Restore(ctx, owner.ID, id, s.ID)
		if err != nil || v.LastSnapshot != s.ID {
			t.Fatalf("restore %s: %+v, %v", s.ID, v.Status, err)
		}
		ref = sandboxRef(ctx, t, eng, v.SandboxID)
		if got := mustExec(ctx, t, eng, ref, describeTree); got != want {
			t.Fatalf("the tree restored from %s differs:\nwant:\n%s\ngot:\n%s", s.ID, want, got)
		}
	}
	restoreAndCompare(snaps[4], wants[4])

	// Keep 3: the sixth snapshot gives up the three oldest, which the fourth is built on, so they
	// are held, three of them being no more than keep.
	keep(3)
	s6, want6 := take("echo six > /root/tree/six")
	snaps, wants = append(snaps, s6), append(wants, want6)
	if got := snapshotIDsOf(ctx, t, d, id); !slices.Equal(got, idsOf(snaps)) {
		t.Fatalf("after the sixth snapshot with keep 3: %v, want all six held", got)
	}
	// The seventh gives up four, more than keep: the fifth (the oldest kept) is compacted into a
	// full snapshot and the four go, objects and all.
	s7, want7 := take("echo seven > /root/tree/seven")
	snaps, wants = append(snaps, s7), append(wants, want7)
	if got := snapshotIDsOf(ctx, t, d, id); !slices.Equal(got, idsOf(snaps[4:])) {
		t.Fatalf("after the seventh snapshot: %v, want %v", got, idsOf(snaps[4:]))
	}
	compacted, err := d.Store.SnapshotByID(ctx, snaps[4].ID)
	if err != nil || compacted.BaseID != "" || compacted.Depth != 0 || compacted.ObjectKey != activities.SnapshotFullKey(id, compacted.ID) {
		t.Fatalf("the compacted snapshot: %+v, %v; want full, in its own object", compacted, err)
	}
	checkStored(ctx, t, d, compacted)
	for _, s := range snaps[:4] {
		for _, key := range []string{s.ObjectKey, s.IndexKey, activities.SnapshotManifestKey(id, s.ID)} {
			if _, err := d.Blobs.Stat(ctx, key); err == nil || !isNotFound(err) {
				t.Errorf("%s of dropped snapshot %s: %v, want it gone", key, s.ID, err)
			}
		}
	}
	if _, err := d.Blobs.Stat(ctx, snaps[4].ObjectKey); !isNotFound(err) {
		t.Errorf("the incremental object of the compacted snapshot: %v, want it gone", err)
	}
	if row, err := d.Store.SnapshotByID(ctx, s7.ID); err != nil || row.Depth != 2 {
		t.Fatalf("the newest snapshot after the compaction: %+v, %v; want two deep", row, err)
	}
	restoreAndCompare(s7, want7)
	if ups, err := d.Blobs.ListIncomplete(ctx, "boxes/"+string(id)+"/"); err != nil || len(ups) != 0 {
		t.Fatalf("incomplete uploads left: %v, %v", ups, err)
	}
	if cks, err := eng.ListCheckpoints(ctx); err != nil || len(cks) != 0 {
		t.Fatalf("checkpoints left on the engine: %+v, %v", cks, err)
	}
}

func snapshotIDsOf(ctx context.Context, t *testing.T, d *devstack.Dev, id cocoonbox.BoxID) []string {
	t.Helper()
	all, err := d.Store.ListSnapshots(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(all)
	return idsOf(all)
}

func idsOf(snaps []cocoonbox.Snapshot) []string {
	out := []string{}
	for _, s := range snaps {
		out = append(out, s.ID)
	}
	return out
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, objstore.ErrNotFound) }
