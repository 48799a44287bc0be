package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// openWithConn returns a store on a fresh database and a plain connection to the same database,
// for tests that must write rows the queries refuse to, such as a share that has expired.
func openWithConn(t *testing.T) (*store.Store, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := storetest.URL(t)
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return st, conn
}

// expireShare moves a share's expiry into the past, which PutShare never does.
func expireShare(t *testing.T, conn *pgx.Conn, box cocoonbox.BoxID, user string) {
	t.Helper()
	_, err := conn.Exec(context.Background(),
		`UPDATE shares SET expires_at = now() - interval '1 minute' WHERE box_id = $1 AND user_id = $2`,
		string(box), user)
	if err != nil {
		t.Fatal(err)
	}
}

func TestPutShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	b := newBox(t, st, alice, "dev")

	s, err := st.PutShare(ctx, b.ID, bob, cocoonbox.RoleViewer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.BoxID != b.ID || s.UserID != bob || s.UserName != "bob" || s.Role != cocoonbox.RoleViewer ||
		s.ExpiresAt != nil || s.CreatedAt.IsZero() {
		t.Errorf("PutShare = %+v", s)
	}
	if role, err := st.ShareRole(ctx, b.ID, bob); err != nil || role != cocoonbox.RoleViewer {
		t.Errorf("ShareRole = %q, %v; want viewer", role, err)
	}

	// A re-share replaces the grant, expiry and creation time included.
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	again, err := st.PutShare(ctx, b.ID, bob, cocoonbox.RoleDriver, &until)
	if err != nil {
		t.Fatal(err)
	}
	if again.Role != cocoonbox.RoleDriver || again.ExpiresAt == nil || !again.ExpiresAt.Equal(until) ||
		again.CreatedAt.Before(s.CreatedAt) {
		t.Errorf("re-share = %+v, first %+v", again, s)
	}
	if role, err := st.ShareRole(ctx, b.ID, bob); err != nil || role != cocoonbox.RoleDriver {
		t.Errorf("ShareRole after re-share = %q, %v; want driver", role, err)
	}
	if list, err := st.ListShares(ctx, b.ID); err != nil || len(list) != 1 {
		t.Errorf("ListShares after re-share = %+v, %v; want one share", list, err)
	}

	past := time.Now().Add(-time.Minute)
	invalid := []struct {
		what, field string
		user        string
		role        cocoonbox.Role
		expires     *time.Time
	}{
		{"owner role", "role", bob, cocoonbox.RoleOwner, nil},
		{"unknown role", "role", bob, "root", nil},
		{"empty role", "role", bob, "", nil},
		{"past expiry", "expires_at", bob, cocoonbox.RoleViewer, &past},
		{"the owner", "user", alice, cocoonbox.RoleViewer, nil},
	}
	for _, c := range invalid {
		_, err := st.PutShare(ctx, b.ID, c.user, c.role, c.expires)
		if !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorField(err) != c.field {
			t.Errorf("%s: %v, want ErrInvalid naming %s", c.what, err, c.field)
		}
	}

	deleted := newBox(t, st, alice, "gone")
	if err := st.MarkBoxDeleted(ctx, deleted.ID); err != nil {
		t.Fatal(err)
	}
	notFound := map[string]struct {
		box  cocoonbox.BoxID
		user string
	}{
		"unknown box":  {cocoonbox.NewBoxID(), bob},
		"deleted box":  {deleted.ID, bob},
		"unknown user": {b.ID, "usr_nobody"},
	}
	for what, c := range notFound {
		if _, err := st.PutShare(ctx, c.box, c.user, cocoonbox.RoleViewer, nil); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", what, err)
		}
	}
	// Failed attempts left the share as it was.
	if role, err := st.ShareRole(ctx, b.ID, bob); err != nil || role != cocoonbox.RoleDriver {
		t.Errorf("ShareRole after failed puts = %q, %v; want driver", role, err)
	}
}

func TestShareExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := openWithConn(t)
	alice, bob, carol := newUser(t, st, "alice"), newUser(t, st, "bob"), newUser(t, st, "carol")
	b := newBox(t, st, alice, "dev")

	if _, err := st.PutShare(ctx, b.ID, bob, cocoonbox.RoleAdmin, nil); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(time.Hour)
	if _, err := st.PutShare(ctx, b.ID, carol, cocoonbox.RoleDriver, &soon); err != nil {
		t.Fatal(err)
	}
	if list, err := st.ListShares(ctx, b.ID); err != nil || len(list) != 2 ||
		list[0].UserName != "bob" || list[1].UserName != "carol" {
		t.Errorf("ListShares = %+v, %v; want bob then carol", list, err)
	}

	expireShare(t, conn, b.ID, carol)
	if _, err := st.ShareRole(ctx, b.ID, carol); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ShareRole of an expired share: %v, want ErrNotFound", err)
	}
	if list, err := st.ListShares(ctx, b.ID); err != nil || len(list) != 1 || list[0].UserID != bob {
		t.Errorf("ListShares with carol's expired = %+v, %v; want bob only", list, err)
	}
	// Sharing again revives it.
	if _, err := st.PutShare(ctx, b.ID, carol, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	if role, err := st.ShareRole(ctx, b.ID, carol); err != nil || role != cocoonbox.RoleViewer {
		t.Errorf("ShareRole after re-share = %q, %v; want viewer", role, err)
	}
}

func TestDeleteShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := openWithConn(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	b := newBox(t, st, alice, "dev")

	if list, err := st.ListShares(ctx, b.ID); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListShares of an unshared box = %#v, %v; want an empty list", list, err)
	}
	if _, err := st.ShareRole(ctx, b.ID, bob); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ShareRole without a share: %v, want ErrNotFound", err)
	}
	if err := st.DeleteShare(ctx, b.ID, bob); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteShare without a share: %v, want ErrNotFound", err)
	}
	if _, err := st.PutShare(ctx, b.ID, bob, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteShare(ctx, b.ID, bob); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ShareRole(ctx, b.ID, bob); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ShareRole after DeleteShare: %v, want ErrNotFound", err)
	}
	if err := st.DeleteShare(ctx, b.ID, bob); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteShare: %v, want ErrNotFound", err)
	}

	// An expired share can still be removed, so unsharing never leaves a row behind.
	if _, err := st.PutShare(ctx, b.ID, bob, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	expireShare(t, conn, b.ID, bob)
	if err := st.DeleteShare(ctx, b.ID, bob); err != nil {
		t.Errorf("DeleteShare of an expired share: %v", err)
	}
}
