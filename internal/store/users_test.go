package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestDisableUser: disabling a user revokes every token of theirs with it, so none
// authenticates; a second disable keeps the first's time; other users are untouched.
func TestDisableUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	token := func(user, name string) []byte {
		t.Helper()
		secret, err := store.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateToken(ctx, user, name, store.HashToken(secret)); err != nil {
			t.Fatal(err)
		}
		return store.HashToken(secret)
	}
	a1, _, b1 := token(alice, "laptop"), token(alice, "ci"), token(bob, "laptop")

	u, revoked, err := st.DisableUser(ctx, alice)
	if err != nil || revoked != 2 || u.DisabledAt == nil {
		t.Fatalf("DisableUser(alice) = %+v, %d, %v; want her disabled and both tokens revoked", u, revoked, err)
	}
	if _, _, err := st.UserByTokenHash(ctx, a1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a disabled user's token: %v, want ErrNotFound", err)
	}
	if got, _, err := st.UserByTokenHash(ctx, b1); err != nil || got.ID != bob {
		t.Errorf("bob's token after alice is disabled: %+v, %v", got, err)
	}
	again, revoked, err := st.DisableUser(ctx, alice)
	if err != nil || revoked != 0 || again.DisabledAt == nil || !again.DisabledAt.Equal(*u.DisabledAt) {
		t.Errorf("disabling again = %+v, %d, %v; want no change", again, revoked, err)
	}
	users, err := st.ListUsers(ctx)
	if err != nil || len(users) != 2 || users[0].Name != "alice" || users[0].DisabledAt == nil || users[1].DisabledAt != nil {
		t.Errorf("ListUsers = %+v, %v; want alice disabled, bob not, by name", users, err)
	}
	if _, _, err := st.DisableUser(ctx, "usr_nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown user: %v, want ErrNotFound", err)
	}
}
