package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestPublicPorts: making a port public or private is idempotent, listed in order, per box, and a
// port outside 1-65535 is refused by the schema itself.
func TestPublicPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	a, b := newBox(t, st, alice, "a"), newBox(t, st, alice, "b")
	for _, p := range []int{8080, 3000, 8080} {
		if err := st.SetPortPublic(ctx, string(a.ID), p, true, alice); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.PublicPorts(ctx, string(a.ID)); err != nil || !slices.Equal(got, []int{3000, 8080}) {
		t.Errorf("PublicPorts = %v, %v", got, err)
	}
	if ok, err := st.PortPublic(ctx, string(b.ID), 3000); err != nil || ok {
		t.Errorf("another box's port 3000 public: %v %v", ok, err)
	}
	for range 2 {
		if err := st.SetPortPublic(ctx, string(a.ID), 3000, false, alice); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := st.PortPublic(ctx, string(a.ID), 3000); err != nil || ok {
		t.Errorf("3000 after private: %v %v", ok, err)
	}
	if err := st.SetPortPublic(ctx, string(a.ID), 70000, true, alice); err == nil {
		t.Error("port 70000 made public")
	}
}
