package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestListTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")

	if list, err := st.ListTokens(ctx, alice); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListTokens with no tokens = %#v, %v; want an empty list", list, err)
	}
	create := func(user, name string) store.Token {
		t.Helper()
		secret, err := store.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := st.CreateToken(ctx, user, name, store.HashToken(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first, revoked, expired := create(alice, "laptop"), create(alice, "ci"), create(alice, "old")
	create(bob, "bob's")
	if err := st.RevokeToken(ctx, alice, revoked.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.SetTokenExpiry(ctx, expired.ID, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}

	list, err := st.ListTokens(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].ID != expired.ID || list[1].ID != revoked.ID || list[2].ID != first.ID {
		t.Fatalf("ListTokens = %+v; want old, ci, laptop", list)
	}
	if list[0].ExpiresAt == nil || list[1].RevokedAt == nil || list[2].RevokedAt != nil || list[2] != first {
		t.Errorf("ListTokens = %+v", list)
	}
}
