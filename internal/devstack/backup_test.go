package devstack_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/backup"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/pgcluster"
	"github.com/loomhand/cocoonbox/internal/s3server"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestBackupRestoreDrill: a deployment whose PostgreSQL and S3 live off its host is backed up,
// its data dir (keyring, Temporal, engine and the boxes' sandboxes) is wiped, and the backup is
// restored into a new empty database. Every user, token, secret, box, share and snapshot is
// back, the box keeps its own policy, and it wakes from its snapshot with its file. Refusals come
// before anything is written: a wrong passphrase, then a database that is not empty.
func TestBackupRestoreDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := shortTemp(t)

	// The deployment's durable services, outside the data dir the drill wipes.
	srv, err := s3server.Start(ctx, s3server.Options{Dir: filepath.Join(dir, "s3"), AccessKey: "drillaccess", SecretKey: "drillsecret-drillsecret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	pg, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "pg"), Database: "before", NoSync: true, DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	createDatabase(ctx, t, pg.URL("before"), "after")
	s3 := config.S3{Endpoint: srv.Endpoint(), Region: config.DefaultRegion, Bucket: "snapshots",
		AccessKey: "drillaccess", SecretKey: "drillsecret-drillsecret", PathStyle: true}
	backups, err := objstore.NewS3(ctx, objstore.Config{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: "backups",
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := backups.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}

	home := filepath.Join(dir, "h")
	cfg := testConfig(t, home)
	cfg.S3 = s3
	cfg.Postgres.URL = pg.URL("before")
	keyring := (&config.Worker{Home: home}).KeyringPath()

	// A deployment in use: a second user with a token and a secret, a box shared with them, with
	// a file, its own idle period, and a sealed snapshot.
	d, owner := startDrill(t, cfg)
	ann, err := d.Store.CreateUser(ctx, store.NewUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	annToken, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Store.CreateToken(ctx, ann.ID, "laptop", store.HashToken(annToken)); err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.LoadKeyring(keyring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&vault.Vault{Store: d.Store, Keys: keys}).Set(ctx, ann.ID, "MODEL_KEY", "sk-drill"); err != nil {
		t.Fatal(err)
	}
	url, root := d.Sandbox()
	eng := sandbox.NewHTTP(url, root, &http.Client{Timeout: time.Minute})
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, "echo survived > /root/drill.txt")
	if _, err := d.Boxes.Share(ctx, owner.ID, id, ann.ID, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	idle, idleSeconds := 42*time.Minute, int64(42*60)
	if _, err := d.Boxes.ChangePolicy(ctx, owner.ID, id, boxsvc.PolicyChange{IdleSeconds: &idleSeconds}); err != nil {
		t.Fatal(err)
	}
	snap, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}

	pass := []byte("drill passphrase, long enough")
	opts := backup.Options{Keyring: keyring, Passphrase: pass, Snapshots: d.Blobs, Target: backups, Log: t.Output()}
	opts.DatabaseURL, opts.Prefix = pg.URL("before"), backup.Folder("drill", time.Now())
	m, err := backup.Backup(ctx, opts)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if len(m.Snapshots) != 1 || m.Snapshots[0].ID != snap.Snapshot.ID || m.Snapshots[0].Missing != "" || m.KeyID != keys.KeyID() {
		t.Fatalf("manifest %+v, want the one snapshot %s present and key %s", m, snap.Snapshot.ID, keys.KeyID())
	}

	// The host is lost: the stack stops and its data dir goes.
	if err := closeDev(t, d); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}

	opts.DatabaseURL = pg.URL("after")
	wrong := opts
	wrong.Passphrase = []byte("not the drill passphrase")
	if _, err := backup.Restore(ctx, wrong); !errors.Is(err, secrets.ErrPassphrase) {
		t.Fatalf("restore with a wrong passphrase: %v", err)
	}
	if _, err := os.Stat(keyring); !errors.Is(err, os.ErrNotExist) || tables(ctx, t, opts.DatabaseURL) != 0 {
		t.Fatalf("a refused restore wrote the keyring (%v) or the database", err)
	}
	res, err := backup.Restore(ctx, opts)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Boxes != 1 || len(res.LostSnapshots) != 0 {
		t.Fatalf("restore %+v, want 1 box and no snapshot lost", res)
	}
	if _, err := backup.Restore(ctx, opts); err == nil || !strings.Contains(err.Error(), "empty database") {
		t.Fatalf("a second restore into the same database: %v", err)
	}

	cfg.Postgres.URL = opts.DatabaseURL
	d, owner = startDrill(t, cfg)
	if u, _, err := d.Store.UserByTokenHash(ctx, store.HashToken(annToken)); err != nil || u.ID != ann.ID {
		t.Fatalf("ann's token after the restore: %+v, %v", u, err)
	}
	keys, err = secrets.LoadKeyring(keyring)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := (&vault.Vault{Store: d.Store, Keys: keys}).Open(ctx, ann.ID, "MODEL_KEY"); err != nil || v != "sk-drill" {
		t.Fatalf("ann's secret after the restore: %q, %v", v, err)
	}
	if role, err := d.Store.ShareRole(ctx, id, ann.ID); err != nil || role != cocoonbox.RoleViewer {
		t.Fatalf("the share after the restore: %s, %v", role, err)
	}
	if snaps, err := d.Store.ListSnapshots(ctx, id); err != nil || len(snaps) != 1 || snaps[0].State != cocoonbox.SnapshotComplete {
		t.Fatalf("the snapshots after the restore: %+v, %v", snaps, err)
	}
	v, err := d.Boxes.Get(ctx, owner.ID, id) // its workflow is gone with Temporal's data: revived
	if err != nil || v.State != cocoonbox.BoxStateHibernated || v.Policy.IdleAfter != idle {
		t.Fatalf("the box after the restore: %+v, %v; want hibernated with its idle period %s", v.Status, err, idle)
	}
	if v, err = d.Boxes.Wake(ctx, owner.ID, id); err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("wake: %+v, %v", v.Status, err)
	}
	out, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"cat", "/root/drill.txt"}})
	if err != nil || strings.TrimSpace(string(out.Stdout)) != "survived" {
		t.Fatalf("the box's file after the restore: %+v, %v", out, err)
	}
	if !hasEvent(ctx, t, d, owner.ID, id, "restored", "backup") {
		t.Fatal("the box's events do not say it was restored")
	}
	if _, err := workflows.GetStatus(ctx, d.Temporal, id); err != nil {
		t.Fatalf("the box's workflow after its wake: %v", err)
	}
}

// startDrill starts a stack of the drill and returns it with its dev user.
func startDrill(t *testing.T, cfg config.Dev) (*devstack.Dev, store.User) {
	t.Helper()
	d := startDev(t, cfg)
	owner, err := d.Store.UserByName(context.Background(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	return d, owner
}

// createDatabase makes an empty database name on the cluster url reaches.
func createDatabase(ctx context.Context, t *testing.T, url, name string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
}

// tables counts the tables in the public schema of the database at url.
func tables(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
