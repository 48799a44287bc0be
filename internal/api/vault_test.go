package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	"github.com/loomhand/cocoonbox/internal/vault"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func TestVaultNeverReturnsValues(t *testing.T) {
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	keys, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.New(t)
	var logs bytes.Buffer
	f := serveOpts(t, api.Options{
		Store:  st,
		Vault:  &vault.Vault{Store: st, Keys: keys},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	annUser, _, ann := f.mint(t, "ann", false)
	_, _, bob := f.mint(t, "bob", false)
	vlt := cbv1.NewVaultServiceClient(f.conn(t))
	const value = "sk-very-secret-value-1234"

	set, err := vlt.SetSecret(as(t, ann), &cbv1.SetSecretRequest{Name: "OPENAI_API_KEY", Value: value})
	if err != nil {
		t.Fatal(err)
	}
	if set.GetName() != "OPENAI_API_KEY" || set.GetCreatedAt() == nil || strings.Contains(set.String(), value) {
		t.Fatalf("SetSecret = %v", set)
	}
	// Over Connect the whole JSON answer is checked, not just the fields this client knows.
	code, body := f.connectCall(t, "/cocoonbox.v1.VaultService/SetSecret", ann, `{"name":"GH_TOKEN","value":"`+value+`"}`)
	if code != 200 || strings.Contains(body, value) {
		t.Fatalf("SetSecret over Connect: %d %s", code, body)
	}
	code, body = f.connectCall(t, "/cocoonbox.v1.VaultService/ListSecrets", ann, `{}`)
	if code != 200 || strings.Contains(body, value) || !strings.Contains(body, "GH_TOKEN") || !strings.Contains(body, "OPENAI_API_KEY") {
		t.Fatalf("ListSecrets over Connect: %d %s", code, body)
	}

	if list, err := vlt.ListSecrets(as(t, bob), &cbv1.ListSecretsRequest{}); err != nil || len(list.GetSecrets()) != 0 {
		t.Fatalf("bob sees ann's secrets: %v, %v", list, err)
	}
	_, err = vlt.DeleteSecret(as(t, bob), &cbv1.DeleteSecretRequest{Name: "GH_TOKEN"})
	wantCode(t, "bob deleting ann's secret", err, codes.NotFound, "name")
	if _, err := vlt.DeleteSecret(as(t, ann), &cbv1.DeleteSecretRequest{Name: "GH_TOKEN"}); err != nil {
		t.Fatal(err)
	}
	_, err = vlt.DeleteSecret(as(t, ann), &cbv1.DeleteSecretRequest{Name: "GH_TOKEN"})
	wantCode(t, "deleting twice", err, codes.NotFound, "GH_TOKEN")
	list, err := vlt.ListSecrets(as(t, ann), &cbv1.ListSecretsRequest{})
	if err != nil || len(list.GetSecrets()) != 1 || list.GetSecrets()[0].GetName() != "OPENAI_API_KEY" {
		t.Fatalf("ListSecrets after delete: %v, %v", list, err)
	}

	_, err = vlt.SetSecret(as(t, ann), &cbv1.SetSecretRequest{Name: "1BAD", Value: value})
	wantCode(t, "a malformed name", err, codes.InvalidArgument, "name")
	_, err = vlt.SetSecret(as(t, ann), &cbv1.SetSecretRequest{Name: "EMPTY"})
	wantCode(t, "an empty value", err, codes.InvalidArgument, "value")
	_, err = vlt.SetSecret(as(t, ann), &cbv1.SetSecretRequest{Name: "BIG", Value: strings.Repeat("v", vault.MaxValue+1)})
	wantCode(t, "an oversized value", err, codes.InvalidArgument, "value")
	if strings.Contains(logs.String(), value) {
		t.Fatalf("a secret value reached the log:\n%s", logs.String())
	}
	// Every change is audited by name, and no event carries the value.
	events, err := st.EventsByActor(context.Background(), annUser.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
		if strings.Contains(string(e.Detail), value) {
			t.Fatalf("audit event %s carries the value: %s", e.Action, e.Detail)
		}
	}
	if got := strings.Join(actions, " "); got != "vault.delete vault.set vault.set" {
		t.Fatalf("audit trail of ann = %q, want vault.delete vault.set vault.set", got)
	}
}
