package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/pgcluster"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Result is what Restore did.
type Result struct {
	Manifest Manifest
	store.Restored
	// LostSnapshots are the snapshots whose objects were gone from the bucket (retention ran
	// after the backup), now failed so that no wake tries them.
	LostSnapshots []string
}

// maxManifest bounds the manifest Restore reads: it lists snapshots, a few hundred bytes each.
const maxManifest = 64 << 20

// Restore brings the backup under o.Prefix into an empty database and the keyring file, then fits
// the database to a deployment whose engines and Temporal are new (store.AfterRestore) and fails
// the snapshots whose objects are gone. It checks everything it can before it writes anything:
// the manifest, the build's schema, the passphrase, an empty database and the dump's checksum.
func Restore(ctx context.Context, o Options) (Result, error) {
	if err := checkPrefix(o.Prefix); err != nil {
		return Result{}, err
	}
	m, err := readManifest(ctx, o)
	if err != nil {
		return Result{}, err
	}
	if m.Schema > store.LatestSchema() {
		return Result{}, fmt.Errorf("restore: the backup's database is at schema %d, this build knows %d: restore with the build that made it, or a newer one", m.Schema, store.LatestSchema())
	}
	if err := checkEmpty(ctx, o.DatabaseURL); err != nil {
		return Result{}, err
	}
	sealed, err := readAll(ctx, o.Target, o.key(keyringName), m.Keyring)
	if err != nil {
		return Result{}, err
	}
	kr, err := secrets.RestoreKeyFile(o.Keyring, sealed, o.Passphrase)
	if err != nil {
		return Result{}, fmt.Errorf("restore: %w", err)
	}
	o.logf("keyring: key %s written to %s", kr.KeyID(), o.Keyring)
	dump, err := download(ctx, o.Target, o.key(databaseName), m.Database)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(dump)
	if err := restoreDatabase(ctx, o.DatabaseURL, dump); err != nil {
		return Result{}, err
	}
	o.logf("database: restored (schema %d)", m.Schema)

	st, err := store.Open(ctx, o.DatabaseURL) // migrates a backup of an older build forward
	if err != nil {
		return Result{}, fmt.Errorf("restore: %w", err)
	}
	defer st.Close()
	res := Result{Manifest: m}
	note := fmt.Sprintf("restored from the backup of %s: asleep, it wakes from its newest snapshot; memory and anything after that snapshot are gone",
		m.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
	if res.Restored, err = st.AfterRestore(ctx, note); err != nil {
		return Result{}, fmt.Errorf("restore: %w", err)
	}
	refs, err := snapshotRefs(ctx, st, o.Snapshots)
	if err != nil {
		return Result{}, err
	}
	var gone []string
	for _, r := range refs {
		if r.Missing != "" {
			o.logf("warning: snapshot %s of box %s: %s", r.ID, r.BoxID, r.Missing)
			gone = append(gone, r.ID)
		}
	}
	if len(gone) > 0 {
		if res.LostSnapshots, err = st.LoseSnapshots(ctx, gone); err != nil {
			return Result{}, fmt.Errorf("restore: %w", err)
		}
	}
	o.logf("boxes: %d asleep, to wake from their snapshots; %d unfinished runs failed; %d snapshots lost",
		res.Boxes, res.Runs, len(res.LostSnapshots))
	return res, nil
}

// readManifest reads and checks the backup's manifest.
func readManifest(ctx context.Context, o Options) (Manifest, error) {
	r, err := o.Target.Get(ctx, o.key(manifestName))
	if errors.Is(err, objstore.ErrNotFound) {
		return Manifest{}, fmt.Errorf("restore: no backup at %s: %s is missing (an unfinished backup has none)", o.Prefix, manifestName)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: read the manifest: %w", err)
	}
	defer r.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(r, maxManifest)).Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("restore: read the manifest: %w", err)
	}
	if m.Format != FormatVersion {
		return Manifest{}, fmt.Errorf("restore: the backup is format %d, this build reads %d", m.Format, FormatVersion)
	}
	return m, nil
}

// checkEmpty refuses a database that already holds tables: a restore never merges into, or
// replaces, a database in use.
func checkEmpty(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("restore: connect to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		return fmt.Errorf("restore: inspect the database: %w", err)
	}
	if tables > 0 {
		return fmt.Errorf("restore: the database holds %d tables; restore into an empty database (create a new one, or drop this one's tables once it is no longer in use)", tables)
	}
	return nil
}

// readAll reads a small backup object whole and checks it against the manifest.
func readAll(ctx context.Context, bucket objstore.Store, key string, want Object) ([]byte, error) {
	r, err := bucket.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("restore: read %s: %w", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, want.Bytes+1))
	if err != nil {
		return nil, fmt.Errorf("restore: read %s: %w", key, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != want.Bytes || hex.EncodeToString(sum[:]) != want.SHA256 {
		return nil, fmt.Errorf("restore: %s does not match the manifest (size or SHA-256)", key)
	}
	return b, nil
}

// download copies a backup object to a temporary file, checked against the manifest before
// anything is restored from it.
func download(ctx context.Context, bucket objstore.Store, key string, want Object) (string, error) {
	r, err := bucket.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("restore: read %s: %w", key, err)
	}
	defer r.Close()
	f, err := os.CreateTemp("", "cocoonbox-restore-*.dump")
	if err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && (n != want.Bytes || hex.EncodeToString(h.Sum(nil)) != want.SHA256) {
		err = fmt.Errorf("%s does not match the manifest (size or SHA-256)", key)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("restore: read %s: %w", key, err)
	}
	return f.Name(), nil
}

// restoreDatabase loads the dump in one transaction: a failure leaves the database empty.
func restoreDatabase(ctx context.Context, url, dump string) error {
	bin, err := pgcluster.ClientTool("pg_restore")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges",
		"--dbname="+url, dump)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("restore: pg_restore: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
