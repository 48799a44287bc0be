package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// snapID returns the nth test snapshot ID. IDs grow with n, so the id tie-break in the queries'
// ordering agrees with the order the tests create snapshots in.
func snapID(n int) string { return fmt.Sprintf("sn_%016x", n) }

// sum returns the hex SHA-256 of s, standing in for a snapshot's checksum.
func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func beginSnapshot(t *testing.T, st *store.Store, box cocoonbox.BoxID, n int) cocoonbox.Snapshot {
	t.Helper()
	s, err := st.BeginSnapshot(context.Background(), store.NewSnapshot{ID: snapID(n), BoxID: box, ObjectKey: "snapshots/" + snapID(n)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSnapshot creates snapshot n of box in state, one statement after another, so that each
// has a later created_at than the one before.
func newSnapshot(t *testing.T, st *store.Store, box cocoonbox.BoxID, n int, state cocoonbox.SnapshotState) cocoonbox.Snapshot {
	t.Helper()
	ctx := context.Background()
	s := beginSnapshot(t, st, box, n)
	var err error
	switch state {
	case cocoonbox.SnapshotComplete:
		s, err = st.CompleteSnapshot(ctx, s.ID, int64(n), sum(s.ID), int64(n))
	case cocoonbox.SnapshotFailed:
		err = st.FailSnapshot(ctx, s.ID)
		s.State = cocoonbox.SnapshotFailed
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func snapshotIDs(snaps []cocoonbox.Snapshot) []string {
	ids := []string{}
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return ids
}

func TestBeginSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box, other := newBox(t, st, alice, "dev").ID, newBox(t, st, alice, "other").ID
	parent := beginSnapshot(t, st, box, 1)

	ns := store.NewSnapshot{ID: snapID(2), BoxID: box, ParentID: parent.ID, ObjectKey: "snapshots/two"}
	s, err := st.BeginSnapshot(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != ns.ID || s.BoxID != box || s.ParentID != parent.ID || s.ObjectKey != ns.ObjectKey ||
		s.State != cocoonbox.SnapshotUploading || s.Bytes != 0 || s.SHA256 != "" || s.Files != 0 || s.Pinned ||
		s.CreatedAt.IsZero() {
		t.Errorf("BeginSnapshot = %+v", s)
	}
	if again, err := st.BeginSnapshot(ctx, ns); err != nil || again != s {
		t.Errorf("repeated BeginSnapshot = %+v, %v; want the first row %+v", again, err, s)
	}
	if got, err := st.SnapshotByID(ctx, ns.ID); err != nil || got != s {
		t.Errorf("SnapshotByID = %+v, %v", got, err)
	}
	if parent.ParentID != "" {
		t.Errorf("a snapshot begun with no parent has parent %q", parent.ParentID)
	}

	// A retry after the upload finished returns the row as it now is.
	done, err := st.CompleteSnapshot(ctx, ns.ID, 10, sum("two"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := st.BeginSnapshot(ctx, ns); err != nil || again != done {
		t.Errorf("BeginSnapshot of a complete snapshot = %+v, %v; want it unchanged %+v", again, err, done)
	}

	conflicts := map[string]store.NewSnapshot{
		"same ID, other box":    {ID: ns.ID, BoxID: other, ParentID: parent.ID, ObjectKey: ns.ObjectKey},
		"same ID, other parent": {ID: ns.ID, BoxID: box, ObjectKey: ns.ObjectKey},
		"same ID, other key":    {ID: ns.ID, BoxID: box, ParentID: parent.ID, ObjectKey: "snapshots/elsewhere"},
		"taken object key":      {ID: snapID(3), BoxID: box, ObjectKey: ns.ObjectKey},
	}
	for what, ns := range conflicts {
		if _, err := st.BeginSnapshot(ctx, ns); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", what, err)
		}
	}

	notFound := map[string]store.NewSnapshot{
		"unknown box":    {ID: snapID(4), BoxID: cocoonbox.NewBoxID(), ObjectKey: "snapshots/four"},
		"unknown parent": {ID: snapID(5), BoxID: box, ParentID: snapID(99), ObjectKey: "snapshots/five"},
	}
	for what, ns := range notFound {
		if _, err := st.BeginSnapshot(ctx, ns); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", what, err)
		}
	}

	invalid := map[string]store.NewSnapshot{
		"id":         {BoxID: box, ObjectKey: "snapshots/six"},
		"box_id":     {ID: snapID(6), ObjectKey: "snapshots/six"},
		"object_key": {ID: snapID(6), BoxID: box},
	}
	for field, ns := range invalid {
		_, err := st.BeginSnapshot(ctx, ns)
		if !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorCode(err) != cocoonbox.EInvalid ||
			!strings.Contains(err.Error(), field+": is required") {
			t.Errorf("no %s: %v, want ErrInvalid naming the field", field, err)
		}
	}
	if _, err := st.SnapshotByID(ctx, snapID(99)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SnapshotByID of an unknown snapshot: %v, want ErrNotFound", err)
	}
}

func TestCompleteSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	box := newBox(t, st, newUser(t, st, "alice"), "dev").ID
	s := beginSnapshot(t, st, box, 1)

	checksum := sum("layer")
	done, err := st.CompleteSnapshot(ctx, s.ID, 1<<40, checksum, 12345)
	if err != nil {
		t.Fatal(err)
	}
	want := s
	want.State, want.Bytes, want.SHA256, want.Files = cocoonbox.SnapshotComplete, 1<<40, checksum, 12345
	if done != want {
		t.Errorf("CompleteSnapshot = %+v, want %+v", done, want)
	}
	if got, err := st.SnapshotByID(ctx, s.ID); err != nil || got != want {
		t.Errorf("SnapshotByID after completing = %+v, %v; want %+v", got, err, want)
	}
	// The checksum is compared by value, so a retry that spells it in capitals is the same one.
	for _, hexSum := range []string{checksum, strings.ToUpper(checksum)} {
		if again, err := st.CompleteSnapshot(ctx, s.ID, 1<<40, hexSum, 12345); err != nil || again != want {
			t.Errorf("repeated CompleteSnapshot with %s = %+v, %v; want %+v", hexSum, again, err, want)
		}
	}

	conflicts := map[string]func() error{
		"other bytes": func() error { _, err := st.CompleteSnapshot(ctx, s.ID, 1, checksum, 12345); return err },
		"other sha256": func() error {
			_, err := st.CompleteSnapshot(ctx, s.ID, 1<<40, sum("other"), 12345)
			return err
		},
		"other files": func() error { _, err := st.CompleteSnapshot(ctx, s.ID, 1<<40, checksum, 1); return err },
		"failed": func() error {
			failed := newSnapshot(t, st, box, 2, cocoonbox.SnapshotFailed)
			_, err := st.CompleteSnapshot(ctx, failed.ID, 1, checksum, 1)
			return err
		},
	}
	for what, complete := range conflicts {
		if err := complete(); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", what, err)
		}
	}
	if got, _ := st.SnapshotByID(ctx, s.ID); got != want {
		t.Errorf("after conflicting completes: %+v, want it unchanged %+v", got, want)
	}
	if _, err := st.CompleteSnapshot(ctx, snapID(99), 1, checksum, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown snapshot: %v, want ErrNotFound", err)
	}

	pending := beginSnapshot(t, st, box, 3)
	invalid := []struct {
		field        string
		bytes, files int64
		sha256       string
	}{
		{"sha256", 1, 1, ""},
		{"sha256", 1, 1, "abc"},
		{"sha256", 1, 1, strings.Repeat("zz", 32)},
		{"sha256", 1, 1, checksum + "00"},
		{"bytes", -1, 1, checksum},
		{"files", 1, -1, checksum},
	}
	for _, c := range invalid {
		_, err := st.CompleteSnapshot(ctx, pending.ID, c.bytes, c.sha256, c.files)
		if !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorCode(err) != cocoonbox.EInvalid ||
			!strings.Contains(err.Error(), c.field+": ") {
			t.Errorf("CompleteSnapshot(%d, %q, %d): %v, want ErrInvalid naming %s", c.bytes, c.sha256, c.files, err, c.field)
		}
	}
	if got, _ := st.SnapshotByID(ctx, pending.ID); got != pending {
		t.Errorf("after invalid completes: %+v, want it still uploading %+v", got, pending)
	}
}

func TestFailSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	box := newBox(t, st, newUser(t, st, "alice"), "dev").ID
	s := beginSnapshot(t, st, box, 1)

	for range 2 { // failing a failed snapshot does nothing
		if err := st.FailSnapshot(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := st.SnapshotByID(ctx, s.ID); err != nil || got.State != cocoonbox.SnapshotFailed {
			t.Errorf("after FailSnapshot: %+v, %v; want failed", got, err)
		}
	}
	done := newSnapshot(t, st, box, 2, cocoonbox.SnapshotComplete)
	if err := st.FailSnapshot(ctx, done.ID); !errors.Is(err, store.ErrConflict) {
		t.Errorf("failing a complete snapshot: %v, want ErrConflict", err)
	}
	if got, _ := st.SnapshotByID(ctx, done.ID); got != done {
		t.Errorf("after failing it: %+v, want it still complete %+v", got, done)
	}
	if err := st.FailSnapshot(ctx, snapID(99)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown snapshot: %v, want ErrNotFound", err)
	}
}

func TestListSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box, other := newBox(t, st, alice, "dev").ID, newBox(t, st, alice, "other").ID

	if got, err := st.ListSnapshots(ctx, box); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListSnapshots with none = %#v, %v; want an empty list", got, err)
	}
	if _, err := st.LatestSnapshot(ctx, box); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSnapshot with none: %v, want ErrNotFound", err)
	}

	older := newSnapshot(t, st, box, 1, cocoonbox.SnapshotComplete)
	latest := newSnapshot(t, st, box, 2, cocoonbox.SnapshotComplete)
	newSnapshot(t, st, box, 3, cocoonbox.SnapshotFailed)
	newSnapshot(t, st, box, 4, cocoonbox.SnapshotUploading)
	newSnapshot(t, st, other, 5, cocoonbox.SnapshotComplete)

	list, err := st.ListSnapshots(ctx, box)
	if want := []string{snapID(4), snapID(3), snapID(2), snapID(1)}; err != nil || !slices.Equal(snapshotIDs(list), want) {
		t.Errorf("ListSnapshots = %v, %v; want %v (newest first)", snapshotIDs(list), err, want)
	}
	if got, err := st.LatestSnapshot(ctx, box); err != nil || got != latest {
		t.Errorf("LatestSnapshot = %+v, %v; want %+v, skipping the failed and uploading ones", got, err, latest)
	}

	if err := st.SetSnapshotPinned(ctx, older.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.SnapshotByID(ctx, older.ID); !got.Pinned {
		t.Errorf("after pinning: %+v", got)
	}
	if err := st.SetSnapshotPinned(ctx, older.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.SnapshotByID(ctx, older.ID); got.Pinned {
		t.Errorf("after unpinning: %+v", got)
	}
	if err := st.SetSnapshotPinned(ctx, snapID(99), true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pinning an unknown snapshot: %v, want ErrNotFound", err)
	}

	// Deleting a parent leaves its children without one.
	child, err := st.BeginSnapshot(ctx, store.NewSnapshot{ID: snapID(6), BoxID: box, ParentID: latest.ID, ObjectKey: "snapshots/child"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSnapshot(ctx, latest.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSnapshot(ctx, latest.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting it again: %v, want ErrNotFound", err)
	}
	if _, err := st.SnapshotByID(ctx, latest.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SnapshotByID after deleting: %v, want ErrNotFound", err)
	}
	if got, err := st.SnapshotByID(ctx, child.ID); err != nil || got.ParentID != "" {
		t.Errorf("child after deleting its parent: %+v, %v; want no parent", got, err)
	}
	if got, err := st.LatestSnapshot(ctx, box); err != nil || got.ID != older.ID {
		t.Errorf("LatestSnapshot after deleting the latest = %+v, %v; want %s", got, err, older.ID)
	}
}

func TestSnapshotsToPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box, other := newBox(t, st, alice, "dev").ID, newBox(t, st, alice, "other").ID

	if got, err := st.SnapshotsToPrune(ctx, box, 2); err != nil || got == nil || len(got) != 0 {
		t.Errorf("SnapshotsToPrune with none = %#v, %v; want an empty list", got, err)
	}

	// Oldest first: a pinned complete one, two complete, a failed one, two complete, and an
	// upload in progress, newer than everything else.
	pinned := newSnapshot(t, st, box, 1, cocoonbox.SnapshotComplete)
	if err := st.SetSnapshotPinned(ctx, pinned.ID, true); err != nil {
		t.Fatal(err)
	}
	newSnapshot(t, st, box, 2, cocoonbox.SnapshotComplete)
	newSnapshot(t, st, box, 3, cocoonbox.SnapshotComplete)
	newSnapshot(t, st, box, 4, cocoonbox.SnapshotFailed)
	newSnapshot(t, st, box, 5, cocoonbox.SnapshotComplete)
	newSnapshot(t, st, box, 6, cocoonbox.SnapshotComplete)
	newSnapshot(t, st, box, 7, cocoonbox.SnapshotUploading)
	newSnapshot(t, st, other, 8, cocoonbox.SnapshotFailed)

	prune := func(keep int) []string {
		t.Helper()
		snaps, err := st.SnapshotsToPrune(ctx, box, keep)
		if err != nil {
			t.Fatal(err)
		}
		return snapshotIDs(snaps)
	}
	cases := []struct {
		keep int
		want []int
	}{
		{2, []int{2, 3, 4}},
		{0, []int{2, 3, 4, 5}}, // the newest complete snapshot stays whatever keep says
		{-1, []int{2, 3, 4, 5}},
		{1, []int{2, 3, 4, 5}},
		{4, []int{4}},
		{10, []int{4}},
	}
	for _, c := range cases {
		want := []string{}
		for _, n := range c.want {
			want = append(want, snapID(n))
		}
		if got := prune(c.keep); !slices.Equal(got, want) {
			t.Errorf("SnapshotsToPrune(keep %d) = %v, want %v", c.keep, got, want)
		}
	}

	// A pinned snapshot among the newest takes up a slot rather than adding one.
	if err := st.SetSnapshotPinned(ctx, snapID(5), true); err != nil {
		t.Fatal(err)
	}
	if got, want := prune(2), []string{snapID(2), snapID(3), snapID(4)}; !slices.Equal(got, want) {
		t.Errorf("SnapshotsToPrune(keep 2) with the second newest pinned = %v, want %v", got, want)
	}
	if got, want := prune(1), []string{snapID(2), snapID(3), snapID(4)}; !slices.Equal(got, want) {
		t.Errorf("SnapshotsToPrune(keep 1) with the second newest pinned = %v, want %v", got, want)
	}
}

// TestSnapshotChains: an incremental snapshot begins only on a complete snapshot of its own box,
// counts its depth, restores through its chain oldest first, keeps its base from being deleted,
// and a compaction makes it full and shortens the chains built on it; a snapshot that could not
// be incremental is made full while it uploads.
func TestSnapshotChains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box, other := newBox(t, st, alice, "dev").ID, newBox(t, st, alice, "other").ID
	on := func(n int, base string) (cocoonbox.Snapshot, error) {
		return st.BeginSnapshot(ctx, store.NewSnapshot{ID: snapID(n), BoxID: box, BaseID: base,
			ObjectKey: "snapshots/" + snapID(n), IndexKey: "index/" + snapID(n)})
	}
	complete := func(s cocoonbox.Snapshot) cocoonbox.Snapshot {
		t.Helper()
		s, err := st.CompleteSnapshot(ctx, s.ID, 1, sum(s.ID), 1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full, err := on(1, "")
	if err != nil || full.Depth != 0 || full.IndexKey != "index/"+snapID(1) {
		t.Fatalf("begin a full snapshot = %+v, %v", full, err)
	}
	if _, err := on(2, full.ID); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "base") {
		t.Errorf("begin on an uploading base: %v, want ErrNotFound naming the base", err)
	}
	complete(full)
	foreign := newSnapshot(t, st, other, 9, cocoonbox.SnapshotComplete)
	if _, err := on(2, foreign.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("begin on another box's snapshot: %v, want ErrNotFound", err)
	}
	chain := []cocoonbox.Snapshot{full}
	for n := 2; n <= 4; n++ {
		s, err := on(n, chain[len(chain)-1].ID)
		if err != nil || s.Depth != n-1 || s.BaseID != chain[len(chain)-1].ID {
			t.Fatalf("begin snapshot %d = %+v, %v; want depth %d", n, s, err, n-1)
		}
		chain = append(chain, complete(s))
	}
	got, err := st.SnapshotChain(ctx, chain[3].ID)
	if err != nil || !slices.Equal(snapshotIDs(got), snapshotIDs(chain)) {
		t.Fatalf("SnapshotChain = %v, %v; want %v", snapshotIDs(got), err, snapshotIDs(chain))
	}
	if err := st.DeleteSnapshot(ctx, chain[1].ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete a base: %v, want ErrConflict", err)
	}

	// Compacting the second makes it full; the two on it are one and two deep now.
	c, err := st.CompactSnapshot(ctx, chain[1].ID, "full/"+chain[1].ID, 100, sum("full"), 7)
	if err != nil || c.BaseID != "" || c.Depth != 0 || c.ObjectKey != "full/"+chain[1].ID || c.Bytes != 100 {
		t.Fatalf("CompactSnapshot = %+v, %v", c, err)
	}
	got, err = st.SnapshotChain(ctx, chain[3].ID)
	if err != nil || !slices.Equal(snapshotIDs(got), snapshotIDs(chain[1:])) || got[2].Depth != 2 {
		t.Fatalf("chain after the compaction = %v, %v", snapshotIDs(got), err)
	}
	if err := st.DeleteSnapshot(ctx, full.ID); err != nil {
		t.Fatalf("delete the base nothing needs any more: %v", err)
	}

	// An upload that could not be incremental is made full; a complete one never is.
	up, err := on(5, chain[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MakeSnapshotFull(ctx, up.ID); err != nil {
		t.Fatal(err)
	}
	if s, err := st.SnapshotByID(ctx, up.ID); err != nil || s.BaseID != "" || s.Depth != 0 {
		t.Fatalf("after MakeSnapshotFull: %+v, %v", s, err)
	}
	if err := st.MakeSnapshotFull(ctx, chain[3].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MakeSnapshotFull of a complete snapshot: %v, want ErrNotFound", err)
	}
}
