package devstack_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/vault"
)

// TestSecretScanEncodings checks the scan finds a secret however it is wrapped: inside longer
// text at every offset, raw, JSON-escaped, hex, and base64 in both alphabets; and that it does
// not find a value that is not there.
func TestSecretScanEncodings(t *testing.T) {
	const value = `canary"vault<value>&0451`
	s := newScanner([]secret{{"vault value", value}})
	for pad := range 4 {
		prefix := strings.Repeat("x", pad)
		js, _ := json.Marshal(prefix + value)
		for enc, data := range map[string]string{
			"raw":          prefix + value + "tail",
			"json-escaped": string(js),
			"hex":          hex.EncodeToString([]byte(prefix + value + "tail")),
			"HEX":          strings.ToUpper(hex.EncodeToString([]byte(prefix + value))),
			"base64":       base64.StdEncoding.EncodeToString([]byte(prefix + value + "t")),
			"base64url":    base64.RawURLEncoding.EncodeToString([]byte(prefix + value + "tail")),
		} {
			s.hits = nil
			s.scan("sample", []byte("before "+data+" after"))
			if len(s.hits) == 0 {
				t.Errorf("%s at offset %d: not found", enc, pad)
			}
		}
	}
	s.hits = nil
	s.scan("sample", []byte(url.QueryEscape(value[:len(value)-1])+base64.StdEncoding.EncodeToString([]byte(value[1:]))))
	if len(s.hits) != 0 {
		t.Errorf("found in text without it: %v", s.hits)
	}
	if n := needlesOf([]secret{{"vault value", "short"}}); len(n) != 0 {
		t.Errorf("a value under %d bytes gave needles %v", minSecret, n)
	}
}

// TestSecretScanFindsPlantedSecrets proves the scan can fail: secrets of each kind are planted
// where the harness's scan looks — a vault value in an open workflow's input and in a log line,
// a box's sandbox token raw and base64-encoded in a closed workflow's input, its agent
// credential in hex in a log line — and the scan reports each, by kind and place, and nothing else. The stack is
// started without the harness's scan, which would rightly fail the test.
func TestSecretScanFindsPlantedSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := testConfig(t, t.TempDir())
	sc, log := newStackScan(t, cfg.Home)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := devstack.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() }) // not sc.close: the planted secrets are meant to be found

	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	const vaultValue = `canary"vault<value>0451`
	if _, err := (&vault.Vault{Store: d.Store, Keys: devstack.Keyring(d)}).Set(ctx, owner.ID, "CANARY", vaultValue); err != nil {
		t.Fatal(err)
	}
	box, err := d.Store.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: owner.ID, Name: "planted", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatal(err)
	}
	tokens := store.SandboxTokens{Store: d.Store, Keys: devstack.Keyring(d)}
	planted := sandbox.SandboxRef{ID: "sb_00000000000000aa", Token: "5e5a7e1d0c0ffee0d15ea5e0ba5eba11"}
	if err := tokens.PutSandboxToken(ctx, string(box.ID), planted); err != nil {
		t.Fatal(err)
	}
	cred := boxlink.Credential(devstack.Keyring(d).Derive("agent-credential"), box.ID)

	// An open workflow (no worker polls its queue) with the vault value as its input.
	opts := client.StartWorkflowOptions{ID: "secretscan-plant-open", TaskQueue: "secretscan-plant"}
	if _, err := d.Temporal.ExecuteWorkflow(ctx, opts, "Planted", vaultValue); err != nil {
		t.Fatal(err)
	}
	// A closed one whose inputs are the token as bytes (a binary payload) and base64-encoded
	// one byte in.
	ref, err := tokens.SandboxToken(ctx, string(box.ID))
	if err != nil {
		t.Fatal(err)
	}
	token := ref.Token
	opts.ID = "secretscan-plant-closed"
	run, err := d.Temporal.ExecuteWorkflow(ctx, opts, "Planted", []byte("<"+token+">"),
		base64.StdEncoding.EncodeToString([]byte("<"+token+">")))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Temporal.TerminateWorkflow(ctx, opts.ID, run.GetRunID(), "planted"); err != nil {
		t.Fatal(err)
	}
	log.Info("planted", "credential", hex.EncodeToString([]byte(cred)))
	log.Info("planted", "value", vaultValue)

	// Each planted secret, by kind, encoding, and where: the place and the view of it.
	want := []struct{ kind, encoding, place, view string }{
		{"vault value", "raw", "workflow secretscan-plant-open ", "(decoded payload)"},
		{"vault value", "json-escaped", "workflow secretscan-plant-open ", "(protobuf)"},
		{"vault value", "base64", "workflow secretscan-plant-open ", "(json)"},
		{"sandbox token", "raw", "workflow secretscan-plant-closed ", "(protobuf)"},
		{"sandbox token", "base64", "workflow secretscan-plant-closed ", "(decoded payload)"},
		{"agent credential", "hex", "stack log line ", ""},
		{"vault value", "json-escaped", "stack log line ", ""},
	}
	// The planted workflows reach the visibility store shortly after they start.
	err = testutil.Poll(ctx, time.Minute, func() error {
		secrets, err := stackSecrets(ctx, d)
		if err != nil {
			return err
		}
		s := newScanner(secrets)
		if _, err := s.scanHistories(ctx, d.Temporal); err != nil {
			return err
		}
		if err := s.scanLines("stack log", sc.logs["stack log"]); err != nil {
			return err
		}
		return plantedFound(s.hits, want)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// plantedFound checks that hits has each wanted hit, and no hit of a kind where none was planted.
func plantedFound(hits []hit, want []struct{ kind, encoding, place, view string }) error {
	var msgs []string
	for _, w := range want {
		found := false
		for _, h := range hits {
			found = found || h.kind == w.kind && h.encoding == w.encoding &&
				strings.Contains(h.where, w.place) && strings.Contains(h.where, w.view)
		}
		if !found {
			msgs = append(msgs, fmt.Sprintf("missing %s (%s) in %s… %s", w.kind, w.encoding, w.place, w.view))
		}
	}
	for _, h := range hits {
		planted := false
		for _, w := range want {
			planted = planted || h.kind == w.kind && strings.Contains(h.where, w.place)
		}
		if !planted {
			msgs = append(msgs, "unplanted "+h.String())
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("scan reported %d hits: %s", len(hits), strings.Join(msgs, "; "))
	}
	return nil
}
