package vault_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	"github.com/loomhand/cocoonbox/internal/vault"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const value = "sk-test-0123456789abcdef"

func newVault(t *testing.T) (*vault.Vault, string, string) {
	t.Helper()
	st := storetest.New(t)
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	keys, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"alice", "bob"} {
		u, err := st.CreateUser(context.Background(), store.NewUser{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, u.ID)
	}
	return &vault.Vault{Store: st, Keys: keys}, ids[0], ids[1]
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, alice, bob := newVault(t)

	info, err := v.Set(ctx, alice, "OPENAI_KEY", value)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "OPENAI_KEY" || info.CreatedAt.IsZero() || !info.UpdatedAt.Equal(info.CreatedAt) {
		t.Errorf("Set = %+v", info)
	}
	if got, err := v.Open(ctx, alice, "OPENAI_KEY"); err != nil || got != value {
		t.Errorf("Open = %q, %v", got, err)
	}
	if _, err := v.Open(ctx, bob, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Open of another owner's name: %v, want ErrNotFound", err)
	}

	// What the table holds is neither the value nor the data key in clear.
	row, err := v.Store.SecretByName(ctx, alice, "OPENAI_KEY")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(row.Ciphertext, []byte(value)) || len(row.WrappedKey) == 0 || row.KeyID != v.Keys.KeyID() {
		t.Errorf("stored row %+v", row)
	}

	// Replacing keeps the creation time; the new value is what opens.
	again, err := v.Set(ctx, alice, "OPENAI_KEY", "sk-new")
	if err != nil {
		t.Fatal(err)
	}
	if !again.CreatedAt.Equal(info.CreatedAt) || again.UpdatedAt.Before(info.UpdatedAt) {
		t.Errorf("replaced = %+v, first %+v", again, info)
	}
	if got, err := v.Open(ctx, alice, "OPENAI_KEY"); err != nil || got != "sk-new" {
		t.Errorf("Open after replace = %q, %v", got, err)
	}

	if err := v.Delete(ctx, alice, "OPENAI_KEY"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Open(ctx, alice, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Open after Delete: %v, want ErrNotFound", err)
	}
	if err := v.Delete(ctx, alice, "OPENAI_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := v.Set(ctx, "usr_nobody", "X", value); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Set for an unknown owner: %v, want ErrNotFound", err)
	}
}

func TestListHasNoValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, alice, bob := newVault(t)

	if list, err := v.List(ctx, alice); err != nil || list == nil || len(list) != 0 {
		t.Errorf("List with no secrets = %#v, %v; want an empty list", list, err)
	}
	for _, name := range []string{"B_KEY", "A_KEY"} {
		if _, err := v.Set(ctx, alice, name, value); err != nil {
			t.Fatal(err)
		}
	}
	list, err := v.List(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "A_KEY" || list[1].Name != "B_KEY" {
		t.Errorf("List = %+v; want A_KEY, B_KEY", list)
	}
	for _, i := range list {
		// Info has no value field; make sure nothing of it leaks through formatting either.
		if s := strings.Join([]string{i.Name, i.CreatedAt.String(), i.UpdatedAt.String()}, " "); strings.Contains(s, value) {
			t.Errorf("List entry %q holds the value", s)
		}
	}
	if list, err := v.List(ctx, bob); err != nil || len(list) != 0 {
		t.Errorf("List of bob = %+v, %v; want none", list, err)
	}
}

// TestRowsBoundToOwnerAndName copies and tampers with stored rows through the store, as someone
// with write access to the database could, and expects Open to refuse each.
func TestRowsBoundToOwnerAndName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, alice, bob := newVault(t)
	if _, err := v.Set(ctx, alice, "OPENAI_KEY", value); err != nil {
		t.Fatal(err)
	}
	row, err := v.Store.SecretByName(ctx, alice, "OPENAI_KEY")
	if err != nil {
		t.Fatal(err)
	}
	put := func(r store.SecretRow) {
		t.Helper()
		if _, err := v.Store.PutSecret(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	toBob := row
	toBob.OwnerID = bob
	put(toBob)
	if got, err := v.Open(ctx, bob, "OPENAI_KEY"); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("row copied to another owner: %q, %v; want secrets.ErrAuth", got, err)
	}

	renamed := row
	renamed.Name = "OTHER_KEY"
	put(renamed)
	if got, err := v.Open(ctx, alice, "OTHER_KEY"); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("row copied to another name: %q, %v; want secrets.ErrAuth", got, err)
	}

	// The value layer is bound too: another secret's data key and nonce with this ciphertext
	// (or the reverse) do not open.
	if _, err := v.Set(ctx, alice, "SPARE", value); err != nil {
		t.Fatal(err)
	}
	spare, err := v.Store.SecretByName(ctx, alice, "SPARE")
	if err != nil {
		t.Fatal(err)
	}
	mixed := spare
	mixed.Ciphertext, mixed.Nonce = row.Ciphertext, row.Nonce
	put(mixed)
	if got, err := v.Open(ctx, alice, "SPARE"); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("ciphertext under another data key: %q, %v; want secrets.ErrAuth", got, err)
	}

	tampered := row
	tampered.WrappedKey = bytes.Clone(row.WrappedKey)
	tampered.WrappedKey[len(tampered.WrappedKey)-1] ^= 1
	put(tampered)
	if got, err := v.Open(ctx, alice, "OPENAI_KEY"); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("tampered wrapped key: %q, %v; want secrets.ErrAuth", got, err)
	}

	flipped := row
	flipped.Ciphertext = bytes.Clone(row.Ciphertext)
	flipped.Ciphertext[0] ^= 1
	put(flipped)
	if got, err := v.Open(ctx, alice, "OPENAI_KEY"); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("tampered ciphertext: %q, %v; want secrets.ErrAuth", got, err)
	}

	// Another master key cannot unwrap at all.
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	other, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	put(row)
	stranger := &vault.Vault{Store: v.Store, Keys: other}
	if _, err := stranger.Open(ctx, alice, "OPENAI_KEY"); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Errorf("another keyring: %v, want secrets.ErrUnknownKey", err)
	}
	if got, err := v.Open(ctx, alice, "OPENAI_KEY"); err != nil || got != value {
		t.Errorf("restored row = %q, %v", got, err)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, alice, _ := newVault(t)

	cases := []struct {
		what, name, value, field string
	}{
		{"empty name", "", value, "name"},
		{"leading digit", "1KEY", value, "name"},
		{"dash", "MY-KEY", value, "name"},
		{"too long", "K" + strings.Repeat("x", 128), value, "name"},
		{"empty value", "KEY", "", "value"},
		{"oversized value", "KEY", strings.Repeat("v", vault.MaxValue+1), "value"},
	}
	for _, c := range cases {
		_, err := v.Set(ctx, alice, c.name, c.value)
		var e *cocoonbox.Error
		if !errors.As(err, &e) || e.Code != cocoonbox.EInvalid || e.Field != c.field {
			t.Errorf("%s: %v, want invalid naming %s", c.what, err, c.field)
			continue
		}
		if c.value != "" && strings.Contains(err.Error(), c.value) {
			t.Errorf("%s: the error holds the value", c.what)
		}
	}
	// The longest name and value allowed are fine.
	longest := "_" + strings.Repeat("a", 127)
	if _, err := v.Set(ctx, alice, longest, strings.Repeat("v", vault.MaxValue)); err != nil {
		t.Errorf("longest name and value: %v", err)
	}
	for what, err := range map[string]error{
		"Open":   func() error { _, err := v.Open(ctx, alice, "bad-name"); return err }(),
		"Delete": v.Delete(ctx, alice, "bad-name"),
	} {
		if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !strings.HasPrefix(cocoonbox.ErrorMessage(err), "name: ") {
			t.Errorf("%s with a bad name: %v, want invalid naming name", what, err)
		}
	}
}
