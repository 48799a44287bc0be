package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestErrorsCarryDomainCodes: what the store returns at its edge has the domain code it means,
// so no caller needs a table of its own to tell a taken name from a fault, and still matches the
// store's sentinel; a missing field is named in the message.
func TestErrorsCarryDomainCodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	b := newBox(t, st, alice, "dev")

	_, err := st.CreateBox(ctx, store.NewBox{ID: b.ID, Owner: alice, Name: "other", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || !errors.Is(err, store.ErrConflict) {
		t.Errorf("a box ID taken with other fields: %v (code %s)", err, cocoonbox.ErrorCode(err))
	}
	_, err = st.BoxByID(ctx, cocoonbox.NewBoxID())
	if cocoonbox.ErrorCode(err) != cocoonbox.ENotFound || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown box: %v (code %s)", err, cocoonbox.ErrorCode(err))
	}
	_, err = st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Name: "x", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !errors.Is(err, store.ErrInvalid) ||
		!strings.Contains(cocoonbox.ErrorMessage(err), "owner") {
		t.Errorf("a box without an owner: %v (code %s, message %q)", err, cocoonbox.ErrorCode(err), cocoonbox.ErrorMessage(err))
	}
	_, err = st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: "usr_0000000000000000", Name: "y", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.ENotFound || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a box of an unknown owner: %v (code %s)", err, cocoonbox.ErrorCode(err))
	}
}
