package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestTokenScopeAndUsable: a token is full unless made otherwise in its transaction, an unknown
// scope is refused, and TokenUsable follows revocation.
func TestTokenScopeAndUsable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	u, err := st.CreateUser(ctx, store.NewUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	full, err := st.CreateToken(ctx, u.ID, "laptop", store.HashToken("a"))
	if err != nil || full.Scope != store.ScopeFull {
		t.Fatalf("CreateToken = %+v, %v; want scope full", full, err)
	}
	var read store.Token
	err = st.InTx(ctx, func(q *store.Queries) error {
		var err error
		if read, err = q.CreateToken(ctx, u.ID, "dash", store.HashToken("b")); err != nil {
			return err
		}
		return q.SetTokenScope(ctx, read.ID, store.ScopeRead)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := st.UserByTokenHash(ctx, store.HashToken("b")); err != nil || got.Scope != store.ScopeRead {
		t.Fatalf("UserByTokenHash = %+v, %v; want scope read", got, err)
	}
	if err := st.SetTokenScope(ctx, read.ID, "root"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SetTokenScope root: %v, want ErrInvalid", err)
	}

	if ok, err := st.TokenUsable(ctx, read.ID); err != nil || !ok {
		t.Fatalf("TokenUsable of a live token = %v, %v", ok, err)
	}
	if err := st.RevokeToken(ctx, u.ID, read.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.TokenUsable(ctx, read.ID); err != nil || ok {
		t.Errorf("TokenUsable of a revoked token = %v, %v", ok, err)
	}
	if ok, err := st.TokenUsable(ctx, "tok_none"); err != nil || ok {
		t.Errorf("TokenUsable of no token = %v, %v", ok, err)
	}
}
