// Package backup writes a deployment's control-plane state to S3 and brings it back after the
// control host is lost: the PostgreSQL database (pg_dump), the keyring sealed with an operator's
// passphrase, and a manifest listing the snapshot objects the database refers to. The snapshot
// objects stay where they are, since the bucket is already their durable home.
//
// What a backup does not hold is Temporal's history and the engines' sandboxes: a restore goes
// into a deployment whose Temporal and engines are new, so every box comes back asleep without a
// sandbox and wakes from its newest snapshot, and unfinished agent runs fail saying why.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/pgcluster"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
)

// FormatVersion is the version of the backup layout Backup writes and Restore reads.
const FormatVersion = 1

// The objects of one backup, under its prefix. The manifest is written last: a prefix without
// one holds an unfinished backup, which Restore refuses.
const (
	manifestName = "manifest.json"
	databaseName = "database.dump"
	keyringName  = "keyring.sealed"
)

// Manifest describes one backup.
type Manifest struct {
	Format    int       `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	// Schema is the database's migration version when it was dumped.
	Schema int64 `json:"schema"`
	// KeyID names the keyring's key (not secret), so a restore can tell which key it brings.
	KeyID    string `json:"key_id"`
	Database Object `json:"database"`
	Keyring  Object `json:"keyring"`
	// Snapshots are the complete snapshots the database held, with their objects in the
	// snapshot bucket as the backup found them.
	Snapshots []SnapshotRef `json:"snapshots"`
}

// Object is a file of the backup: its key under the backup's prefix, size and SHA-256.
type Object struct {
	Key    string `json:"key"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// SnapshotRef is a snapshot the backed-up database refers to.
type SnapshotRef struct {
	ID     string `json:"id"`
	BoxID  string `json:"box_id"`
	Object string `json:"object"`
	Index  string `json:"index,omitempty"`
	Bytes  int64  `json:"bytes"`
	// Missing says what of the snapshot was not in the bucket at backup time; empty when all was.
	Missing string `json:"missing,omitempty"`
}

// Options are what Backup and Restore work on.
type Options struct {
	// DatabaseURL is the PostgreSQL database, as pg_dump and pg_restore take it.
	DatabaseURL string
	// Keyring is the deployment's master key file.
	Keyring string
	// Passphrase seals the keyring in the backup (at least secrets.MinPassphrase bytes).
	Passphrase []byte
	// Snapshots is the bucket the box snapshots are in.
	Snapshots objstore.Store
	// Target holds the backups, and Prefix is this backup's folder in it.
	Target objstore.Store
	Prefix string
	// Log receives one line per step, for the operator; nil discards them.
	Log io.Writer
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

func (o Options) key(name string) string { return path.Join(o.Prefix, name) }

// Backup writes a backup of the deployment under o.Prefix in o.Target and returns its manifest.
// A failure leaves no manifest, so the prefix never passes for a finished backup.
func Backup(ctx context.Context, o Options) (Manifest, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return Manifest{}, err
	}
	// The keyring first: a missing key file or a short passphrase fails before any upload.
	sealed, kr, err := secrets.SealKeyFile(o.Keyring, o.Passphrase)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	st, err := store.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	defer st.Close()
	m := Manifest{Format: FormatVersion, CreatedAt: o.Now().UTC(), KeyID: kr.KeyID()}
	if m.Schema, err = st.SchemaVersion(ctx); err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	if m.Snapshots, err = snapshotRefs(ctx, st, o.Snapshots); err != nil {
		return Manifest{}, err
	}
	missing := 0
	for _, s := range m.Snapshots {
		if s.Missing != "" {
			missing++
			o.logf("warning: snapshot %s of box %s: %s", s.ID, s.BoxID, s.Missing)
		}
	}
	o.logf("snapshots: %d complete, %d of them missing from the bucket", len(m.Snapshots), missing)

	if m.Keyring, err = putBytes(ctx, o.Target, o.key(keyringName), sealed); err != nil {
		return Manifest{}, err
	}
	o.logf("keyring: key %s sealed with the passphrase", m.KeyID)
	if m.Database, err = dumpDatabase(ctx, o); err != nil {
		return Manifest{}, err
	}
	o.logf("database: %d bytes (schema %d)", m.Database.Bytes, m.Schema)
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	if _, err := putBytes(ctx, o.Target, o.key(manifestName), body); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// snapshotRefs lists the complete snapshots with their objects' presence in the bucket.
func snapshotRefs(ctx context.Context, st *store.Store, bucket objstore.Store) ([]SnapshotRef, error) {
	snaps, err := st.CompleteSnapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("backup: list snapshots: %w", err)
	}
	refs := make([]SnapshotRef, 0, len(snaps))
	for _, s := range snaps {
		r := SnapshotRef{ID: s.ID, BoxID: string(s.BoxID), Object: s.ObjectKey, Index: s.IndexKey, Bytes: s.Bytes}
		if r.Missing, err = missing(ctx, bucket, s); err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// missing says what of snapshot s is not in the bucket ("" when nothing is): its object, of its
// recorded size, and its index.
func missing(ctx context.Context, bucket objstore.Store, s cocoonbox.Snapshot) (string, error) {
	info, err := bucket.Stat(ctx, s.ObjectKey)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return "object " + s.ObjectKey + " is not in the bucket", nil
	case err != nil:
		return "", fmt.Errorf("check snapshot %s: %w", s.ID, err)
	case info.Size != s.Bytes:
		return fmt.Sprintf("object %s is %d bytes, the snapshot says %d", s.ObjectKey, info.Size, s.Bytes), nil
	}
	if s.IndexKey == "" {
		return "", nil
	}
	if _, err := bucket.Stat(ctx, s.IndexKey); errors.Is(err, objstore.ErrNotFound) {
		return "index " + s.IndexKey + " is not in the bucket", nil
	} else if err != nil {
		return "", fmt.Errorf("check snapshot %s: %w", s.ID, err)
	}
	return "", nil
}

// dumpDatabase streams pg_dump's custom-format archive into the backup. The archive is one
// consistent snapshot of the database (pg_dump reads it in one repeatable-read transaction).
func dumpDatabase(ctx context.Context, o Options) (Object, error) {
	bin, err := pgcluster.ClientTool("pg_dump")
	if err != nil {
		return Object{}, fmt.Errorf("backup: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends pg_dump when the upload fails
	cmd := exec.CommandContext(ctx, bin, "--format=custom", "--no-owner", "--no-privileges", "--dbname="+o.DatabaseURL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Object{}, err
	}
	if err := cmd.Start(); err != nil {
		return Object{}, fmt.Errorf("backup: start pg_dump: %w", err)
	}
	h := sha256.New()
	res, uerr := o.Target.Upload(ctx, o.key(databaseName), io.TeeReader(out, h), objstore.UploadOptions{})
	if uerr != nil {
		cancel()
	}
	werr := cmd.Wait()
	switch {
	case werr != nil && ctx.Err() == nil:
		return Object{}, fmt.Errorf("backup: pg_dump: %w: %s", werr, strings.TrimSpace(stderr.String()))
	case uerr != nil:
		return Object{}, fmt.Errorf("backup: upload the database: %w", uerr)
	case werr != nil:
		return Object{}, fmt.Errorf("backup: pg_dump: %w", werr)
	}
	return Object{Key: databaseName, Bytes: res.Size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// putBytes stores b at key and describes it as a backup object (named by its base).
func putBytes(ctx context.Context, bucket objstore.Store, key string, b []byte) (Object, error) {
	if err := bucket.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		return Object{}, fmt.Errorf("backup: store %s: %w", key, err)
	}
	sum := sha256.Sum256(b)
	return Object{Key: path.Base(key), Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// checkPrefix refuses a backup folder that is empty or not a plain relative path.
func checkPrefix(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.Contains(p, "..") {
		return cocoonbox.Invalid("prefix", fmt.Sprintf("want a folder such as backups/2026-12-05T10-00-00Z, got %q", p))
	}
	return nil
}
