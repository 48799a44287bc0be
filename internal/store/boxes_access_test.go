package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestBoxByOwnerName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	b := newBox(t, st, alice, "dev")

	if got, err := st.BoxByOwnerName(ctx, alice, "dev"); err != nil || got != b {
		t.Errorf("BoxByOwnerName = %+v, %v; want %+v", got, err, b)
	}
	if _, err := st.BoxByOwnerName(ctx, bob, "dev"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another owner's name: %v, want ErrNotFound", err)
	}
	if _, err := st.BoxByOwnerName(ctx, alice, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown name: %v, want ErrNotFound", err)
	}

	// A deleted box is not found by name, and its name goes to the next box.
	if err := st.MarkBoxDeleted(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BoxByOwnerName(ctx, alice, "dev"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted box: %v, want ErrNotFound", err)
	}
	next := newBox(t, st, alice, "dev")
	if got, err := st.BoxByOwnerName(ctx, alice, "dev"); err != nil || got.ID != next.ID {
		t.Errorf("BoxByOwnerName after reuse = %+v, %v; want %s", got, err, next.ID)
	}
}

func TestListBoxesForUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := openWithConn(t)
	alice, bob, carol := newUser(t, st, "alice"), newUser(t, st, "bob"), newUser(t, st, "carol")

	if list, err := st.ListBoxesForUser(ctx, carol); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListBoxesForUser with no boxes = %#v, %v; want an empty list", list, err)
	}

	aliceDev := newBox(t, st, alice, "dev")
	bobWork := newBox(t, st, bob, "work")
	bobOld := newBox(t, st, bob, "old")
	bobGone := newBox(t, st, bob, "gone")
	bobPrivate := newBox(t, st, bob, "private")
	aliceNew := newBox(t, st, alice, "new")
	for _, s := range []struct {
		box  cocoonbox.BoxID
		role cocoonbox.Role
	}{{bobWork.ID, cocoonbox.RoleDriver}, {bobOld.ID, cocoonbox.RoleViewer}, {bobGone.ID, cocoonbox.RoleAdmin}} {
		if _, err := st.PutShare(ctx, s.box, alice, s.role, nil); err != nil {
			t.Fatal(err)
		}
	}
	expireShare(t, conn, bobOld.ID, alice)
	if err := st.MarkBoxDeleted(ctx, bobGone.ID); err != nil {
		t.Fatal(err)
	}
	_ = bobPrivate // never shared: alice must not see it

	list, err := st.ListBoxesForUser(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id   cocoonbox.BoxID
		role cocoonbox.Role
	}{{aliceNew.ID, cocoonbox.RoleOwner}, {bobWork.ID, cocoonbox.RoleDriver}, {aliceDev.ID, cocoonbox.RoleOwner}}
	if len(list) != len(want) {
		t.Fatalf("ListBoxesForUser = %+v; want %d boxes", list, len(want))
	}
	for i, w := range want {
		if list[i].ID != w.id || list[i].Role != w.role {
			t.Errorf("box %d = %s as %s, want %s as %s", i, list[i].ID, list[i].Role, w.id, w.role)
		}
	}
	if list[1].Box != bobWork {
		t.Errorf("shared box = %+v, want %+v", list[1].Box, bobWork)
	}

	// Bob sees his own boxes as owner, deleted ones excluded, whatever he shared.
	list, err = st.ListBoxesForUser(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("bob's boxes = %+v; want 3", list)
	}
	for _, a := range list {
		if a.Owner != bob || a.Role != cocoonbox.RoleOwner || a.DeletedAt != nil {
			t.Errorf("bob's box %+v", a)
		}
	}
}
