package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestSecretRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")

	row := store.SecretRow{
		OwnerID:    alice,
		Name:       "OPENAI_KEY",
		Ciphertext: []byte("ciphertext"),
		Nonce:      bytes.Repeat([]byte{1}, 12),
		WrappedKey: []byte("wrapped"),
		KeyID:      "k1",
	}
	put, err := st.PutSecret(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	if put.OwnerID != alice || put.Name != row.Name || !bytes.Equal(put.Ciphertext, row.Ciphertext) ||
		!bytes.Equal(put.WrappedKey, row.WrappedKey) || put.KeyID != "k1" || put.CreatedAt.IsZero() ||
		!put.UpdatedAt.Equal(put.CreatedAt) {
		t.Errorf("PutSecret = %+v", put)
	}
	if got, err := st.SecretByName(ctx, alice, "OPENAI_KEY"); err != nil || !bytes.Equal(got.Nonce, row.Nonce) ||
		!got.CreatedAt.Equal(put.CreatedAt) {
		t.Errorf("SecretByName = %+v, %v", got, err)
	}

	// Replacing keeps the creation time and moves updated_at.
	row.Ciphertext, row.KeyID = []byte("other"), "k2"
	replaced, err := st.PutSecret(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	if !replaced.CreatedAt.Equal(put.CreatedAt) || !replaced.UpdatedAt.After(put.UpdatedAt) ||
		string(replaced.Ciphertext) != "other" || replaced.KeyID != "k2" {
		t.Errorf("replaced = %+v, first %+v", replaced, put)
	}

	row.Name = "ANTHROPIC_KEY"
	if _, err := st.PutSecret(ctx, row); err != nil {
		t.Fatal(err)
	}
	list, err := st.ListSecrets(ctx, alice)
	if err != nil || len(list) != 2 || list[0].Name != "ANTHROPIC_KEY" || list[1].Name != "OPENAI_KEY" {
		t.Errorf("ListSecrets = %+v, %v; want two in name order", list, err)
	}
	if list, err := st.ListSecrets(ctx, bob); err != nil || list == nil || len(list) != 0 {
		t.Errorf("ListSecrets of bob = %#v, %v; want an empty list", list, err)
	}
	if _, err := st.SecretByName(ctx, bob, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another owner's secret: %v, want ErrNotFound", err)
	}

	if err := st.DeleteSecret(ctx, alice, "OPENAI_KEY"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SecretByName(ctx, alice, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after DeleteSecret: %v, want ErrNotFound", err)
	}
	if err := st.DeleteSecret(ctx, alice, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteSecret: %v, want ErrNotFound", err)
	}

	invalid := map[string]store.SecretRow{
		"bad name":    {OwnerID: alice, Name: "1X", Ciphertext: []byte("c"), Nonce: row.Nonce, WrappedKey: []byte("w"), KeyID: "k"},
		"short nonce": {OwnerID: alice, Name: "X", Ciphertext: []byte("c"), Nonce: []byte{1}, WrappedKey: []byte("w"), KeyID: "k"},
		"no key ID":   {OwnerID: alice, Name: "X", Ciphertext: []byte("c"), Nonce: row.Nonce, WrappedKey: []byte("w")},
		"no wrapped":  {OwnerID: alice, Name: "X", Ciphertext: []byte("c"), Nonce: row.Nonce, KeyID: "k"},
	}
	for what, r := range invalid {
		if _, err := st.PutSecret(ctx, r); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	if _, err := st.PutSecret(ctx, store.SecretRow{OwnerID: "usr_nobody", Name: "X", Ciphertext: []byte("c"),
		Nonce: row.Nonce, WrappedKey: []byte("w"), KeyID: "k"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown owner: %v, want ErrNotFound", err)
	}
}
