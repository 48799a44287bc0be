package secrets_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/secrets"
)

func newKeyring(t *testing.T) *secrets.Keyring {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	k, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := newKeyring(t)
	aad := []byte("sandbox-token:bx_0123456789abcdef")
	for _, plain := range [][]byte{nil, []byte("s"), []byte("tok-" + strings.Repeat("x", 300))} {
		blob, err := k.Seal(plain, aad)
		if err != nil {
			t.Fatal(err)
		}
		if len(blob) != len(plain)+secrets.Overhead {
			t.Errorf("len(blob) = %d, want %d", len(blob), len(plain)+secrets.Overhead)
		}
		// Only long plaintexts: a byte or two turns up in random bytes by chance.
		if len(plain) >= 8 && bytes.Contains(blob, plain) {
			t.Errorf("blob contains the plaintext")
		}
		got, err := k.Open(blob, aad)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("Open = %q, %v; want %q", got, err, plain)
		}
	}
	a, _ := k.Seal([]byte("same"), aad)
	b, _ := k.Seal([]byte("same"), aad)
	if bytes.Equal(a, b) {
		t.Error("two seals of the same plaintext are equal: nonce reused")
	}
	if _, err := k.Seal(make([]byte, secrets.MaxPlaintext+1), aad); err == nil {
		t.Error("Seal accepted an oversized plaintext")
	}
}

func TestOpenRejects(t *testing.T) {
	k := newKeyring(t)
	aad := []byte("secret:usr_a/OPENAI_KEY")
	blob, err := k.Seal([]byte("sk-123"), aad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(blob, []byte("secret:usr_b/OPENAI_KEY")); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("wrong AAD: %v, want ErrAuth", err)
	}
	if _, err := k.Open(blob, nil); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("missing AAD: %v, want ErrAuth", err)
	}
	// Every bit of the blob is covered: header bits fail as unknown version/key or auth.
	for i := range len(blob) * 8 {
		bad := bytes.Clone(blob)
		bad[i/8] ^= 1 << (i % 8)
		if got, err := k.Open(bad, aad); err == nil {
			t.Fatalf("bit %d flipped: Open = %q, want an error", i, got)
		}
	}
	bad := bytes.Clone(blob)
	bad[len(bad)-1] ^= 0x80
	if _, err := k.Open(bad, aad); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("flipped tag bit: %v, want ErrAuth", err)
	}
	bad = bytes.Clone(blob)
	bad[0] = 9
	if _, err := k.Open(bad, aad); !errors.Is(err, secrets.ErrMalformed) {
		t.Errorf("unknown version: %v, want ErrMalformed", err)
	}
	if _, err := k.Open(blob[:secrets.Overhead-1], aad); !errors.Is(err, secrets.ErrMalformed) {
		t.Errorf("short blob: %v, want ErrMalformed", err)
	}
	if _, err := newKeyring(t).Open(blob, aad); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Errorf("other keyring: %v, want ErrUnknownKey", err)
	}
	if _, err := secrets.NewKeyring(make([]byte, 16)); err == nil {
		t.Error("NewKeyring accepted a 16-byte key")
	}
}

func TestLoadOrCreateKeyring(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conf", "master.key")
	k1, err := secrets.LoadOrCreateKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != secrets.KeySize {
		t.Errorf("key file: mode %v, %d bytes; want 0600, %d", fi.Mode(), fi.Size(), secrets.KeySize)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".keyring-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	blob, err := k1.Seal([]byte("persist"), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := secrets.LoadOrCreateKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1.KeyID() != k2.KeyID() || len(k1.KeyID()) != 8 {
		t.Errorf("key IDs %q, %q; want the same 8 hex digits", k1.KeyID(), k2.KeyID())
	}
	if got, err := k2.Open(blob, []byte("a")); err != nil || string(got) != "persist" {
		t.Errorf("reloaded Open = %q, %v", got, err)
	}
}

func TestLoadKeyringRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is subject to the umask
			t.Fatal(err)
		}
		return p
	}
	key := make([]byte, secrets.KeySize)
	for _, tc := range []struct {
		path string
		want string
	}{
		{write("group.key", key, 0o640), "mode 0640"},
		{write("world.key", key, 0o604), "mode 0604"},
		{write("short.key", key[:31], 0o600), "31 bytes"},
		{write("long.key", append(key, '\n'), 0o600), "33 bytes"},
		{write("twice.key", append(key, key...), 0o600), "repeats"},
		{dir, "not a regular file"},
	} {
		before, _ := os.ReadFile(tc.path)
		_, err := secrets.LoadOrCreateKeyring(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line naming the path and %q", tc.path, err, tc.want)
		}
		if after, _ := os.ReadFile(tc.path); !bytes.Equal(before, after) {
			t.Errorf("%s: the refused file was changed", tc.path)
		}
	}
}

// TestLoadKeyringNeverCreates: the roles of a deployment load its key and never make one; a
// missing file is one line naming it and the command that creates it, and CreateKeyring makes
// the first and refuses to replace it.
func TestLoadKeyringNeverCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "master.key")
	_, err := secrets.LoadKeyring(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "cocoonbox admin keyring init") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("missing keyring: %v; want one line naming %s and the init command", err, path)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKeyring left a file: %v", err)
	}
	k1, err := secrets.CreateKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := secrets.CreateKeyring(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second CreateKeyring: %v; want a refusal naming the file", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the second CreateKeyring changed the key")
	}
	k2, err := secrets.LoadKeyring(path)
	if err != nil || k2.KeyID() != k1.KeyID() {
		t.Fatalf("LoadKeyring after CreateKeyring: %v, %v; want key %s", k2, err, k1.KeyID())
	}
}

func TestDerive(t *testing.T) {
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	a, _ := secrets.NewKeyring(key)
	b, _ := secrets.NewKeyring(key)
	if !bytes.Equal(a.Derive("agent-credential"), b.Derive("agent-credential")) || len(a.Derive("x")) != 32 {
		t.Fatal("the same master key derives different keys")
	}
	if bytes.Equal(a.Derive("agent-credential"), a.Derive("other")) {
		t.Fatal("two purposes derive the same key")
	}
	other := make([]byte, secrets.KeySize)
	rand.Read(other)
	c, _ := secrets.NewKeyring(other)
	if bytes.Equal(a.Derive("agent-credential"), c.Derive("agent-credential")) {
		t.Fatal("two master keys derive the same key")
	}
}

// TestSealedKeyFile: a keyring sealed with a passphrase opens with that passphrase only, into a
// key file that opens what the original sealed; a file holding another key is never replaced.
func TestSealedKeyFile(t *testing.T) {
	dir := t.TempDir()
	orig, err := secrets.CreateKeyring(filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := orig.Seal([]byte("sandbox token"), []byte("bx_1"))
	if err != nil {
		t.Fatal(err)
	}
	pass := []byte("correct horse battery")
	if _, _, err := secrets.SealKeyFile(filepath.Join(dir, "master.key"), []byte("short")); err == nil {
		t.Fatal("sealed with a 5-byte passphrase")
	}
	sealed, sealedKeys, err := secrets.SealKeyFile(filepath.Join(dir, "master.key"), pass)
	if err != nil || sealedKeys.KeyID() != orig.KeyID() {
		t.Fatalf("seal: key %v, %v; want %s", sealedKeys, err, orig.KeyID())
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "master.key")); err != nil || bytes.Contains(sealed, raw) {
		t.Fatalf("the sealed file holds the key in the clear (%v)", err)
	}
	to := filepath.Join(dir, "restored", "master.key")
	if _, err := secrets.RestoreKeyFile(to, sealed, []byte("wrong horse battery")); !errors.Is(err, secrets.ErrPassphrase) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if _, err := os.Stat(to); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore wrote %s: %v", to, err)
	}
	k, err := secrets.RestoreKeyFile(to, sealed, pass)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Open(secret, []byte("bx_1")); err != nil || string(got) != "sandbox token" {
		t.Fatalf("the restored key opens %q, %v", got, err)
	}
	if fi, err := os.Stat(to); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := secrets.RestoreKeyFile(to, sealed, pass); err != nil {
		t.Fatalf("restoring over the same key: %v", err)
	}
	other := filepath.Join(dir, "other.key")
	if _, err := secrets.CreateKeyring(other); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.RestoreKeyFile(other, sealed, pass); err == nil || !strings.Contains(err.Error(), "holds another key") {
		t.Fatalf("restoring over another key: %v", err)
	}
	cut := sealed[:len(sealed)-1]
	if _, err := secrets.RestoreKeyFile(filepath.Join(dir, "cut.key"), cut, pass); err == nil {
		t.Fatal("a cut sealed file opened")
	}
}

// TestRotateKeyring: a rotated key file seals with a new primary key and still opens what the
// old one sealed; every process that loads the file agrees, the keys derived from it stay as they
// were (boxes' agent credentials), a sealed backup of it restores all its keys, and a file that
// holds the most keys a keyring may is refused rather than cut.
func TestRotateKeyring(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "master.key")
	old, err := secrets.CreateKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := old.Seal([]byte("box token"), []byte("aad"))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := secrets.RotateKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.KeyID() == old.KeyID() || rotated.KeyCount() != 2 {
		t.Fatalf("after rotation: primary %s (was %s), %d keys", rotated.KeyID(), old.KeyID(), rotated.KeyCount())
	}
	loaded, err := secrets.LoadKeyring(path)
	if err != nil || loaded.KeyID() != rotated.KeyID() {
		t.Fatalf("loaded after rotation: %v, %v", loaded, err)
	}
	if got, err := loaded.Open(blob, []byte("aad")); err != nil || string(got) != "box token" {
		t.Fatalf("a blob of the old key after rotation: %q, %v", got, err)
	}
	if loaded.SealedWithPrimary(blob) {
		t.Error("a blob of the old key counts as sealed with the new primary")
	}
	again, err := loaded.Seal([]byte("box token"), []byte("aad"))
	if err != nil || !loaded.SealedWithPrimary(again) {
		t.Fatalf("a blob sealed after rotation: %v, primary %v", err, loaded.SealedWithPrimary(again))
	}
	if _, err := old.Open(again, []byte("aad")); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Errorf("the old keyring opened a blob of the new key: %v", err)
	}
	if !bytes.Equal(loaded.Derive("agent-credential"), old.Derive("agent-credential")) {
		t.Error("rotation changed a derived key")
	}

	sealed, _, err := secrets.SealKeyFile(path, []byte("a long passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	restored, err := secrets.RestoreKeyFile(filepath.Join(dir, "restored.key"), sealed, []byte("a long passphrase"))
	if err != nil || restored.KeyID() != rotated.KeyID() || restored.KeyCount() != 2 {
		t.Fatalf("restored backup of a rotated file: %v, %v", restored, err)
	}

	for range secrets.MaxKeys - 2 {
		if _, err := secrets.RotateKeyring(path); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(path)
	if _, err := secrets.RotateKeyring(path); err == nil || !strings.Contains(err.Error(), "the most a keyring may") {
		t.Fatalf("rotation of a full keyring: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("a refused rotation changed the file")
	}
}
