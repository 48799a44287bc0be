package worker

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	"github.com/loomhand/cocoonbox/internal/vault"
)

// TestResealAfterRotation: values sealed before a rotation (a sandbox token, a vault secret, a
// webhook secret) are sealed again under the new primary key by one pass, after which a keyring
// holding only the new key opens every one of them, and a second pass finds nothing to do.
func TestResealAfterRotation(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	oldKey, newKey := make([]byte, secrets.KeySize), make([]byte, secrets.KeySize)
	rand.Read(oldKey)
	rand.Read(newKey)
	keyring := func(keys ...[]byte) *secrets.Keyring {
		k, err := secrets.NewKeyringOf(keys)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	before, rotated, after := keyring(oldKey), keyring(newKey, oldKey), keyring(newKey)

	u, err := st.CreateUser(ctx, store.NewUser{Name: "rita"})
	if err != nil {
		t.Fatal(err)
	}
	box := cocoonbox.NewBoxID()
	if _, err := st.CreateBox(ctx, store.NewBox{ID: box, Owner: u.ID, Name: "sealed", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "the sandbox's token"}
	if err := (store.SandboxTokens{Store: st, Keys: before}).PutSandboxToken(ctx, string(box), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := (&vault.Vault{Store: st, Keys: before}).Set(ctx, u.ID, "OPENAI_KEY", "sk-the-key"); err != nil {
		t.Fatal(err)
	}
	hook := store.NewWebhookID()
	sealed, err := before.Seal([]byte("the webhook secret"), activities.WebhookSecretAAD(hook))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateWebhook(ctx, store.Webhook{ID: hook, UserID: u.ID, URL: "https://example.test/hook", SecretSealed: sealed, Events: []string{"box.*"}}); err != nil {
		t.Fatal(err)
	}

	r := &Resealer{Store: st, Keys: rotated, Logger: slog.New(slog.DiscardHandler)}
	if n, err := r.Once(ctx); err != nil || n != 3 {
		t.Fatalf("re-seal after rotation: %d values, %v; want 3", n, err)
	}
	if got, err := (store.SandboxTokens{Store: st, Keys: after}).SandboxToken(ctx, string(box)); err != nil || got.Token != ref.Token {
		t.Errorf("sandbox token with the new key alone: %+v, %v", got, err)
	}
	if got, err := (&vault.Vault{Store: st, Keys: after}).Open(ctx, u.ID, "OPENAI_KEY"); err != nil || got != "sk-the-key" {
		t.Errorf("vault secret with the new key alone: %q, %v", got, err)
	}
	w, err := st.WebhookByID(ctx, hook)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := after.Open(w.SecretSealed, activities.WebhookSecretAAD(hook)); err != nil || string(got) != "the webhook secret" {
		t.Errorf("webhook secret with the new key alone: %q, %v", got, err)
	}
	if n, err := r.Once(ctx); err != nil || n != 0 {
		t.Errorf("a second pass: %d values, %v; want nothing left", n, err)
	}
}
