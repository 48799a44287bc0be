package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/backup"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
)

// passphraseEnv holds the passphrase that seals the keyring in a backup, for scripts; the
// --passphrase-file flag is the other way to give it (never a flag value: it would show in the
// process list).
const passphraseEnv = "COCOONBOX_BACKUP_PASSPHRASE"

// backupFlags are the flags admin backup and admin restore share: where the deployment's
// database, snapshot bucket and keyring are (as serve worker reads them) and the passphrase.
func backupFlags(more ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
		&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL URL (default the worker config's postgres.url)"},
		&cli.StringFlag{Name: "keyring", Usage: "master key file (default <home>/keys/master.key)"},
		&cli.StringFlag{Name: "s3-endpoint", Usage: "S3 endpoint URL of the snapshot bucket and the backups (default AWS S3)"},
		&cli.StringFlag{Name: "s3-bucket", Usage: "snapshot bucket (default " + config.DefaultBucket + ")"},
		&cli.StringFlag{Name: "passphrase-file", Usage: "file holding the passphrase that seals the keyring (or " + passphraseEnv + ")"},
	}, more...)
}

func adminBackupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "back the deployment up to S3: its database, its keyring sealed with a passphrase, a manifest",
		Description: "Writes a new folder under --to (s3://BUCKET/PREFIX, on the snapshot bucket's S3 endpoint\n" +
			"and credentials): the database (pg_dump), the keyring sealed with the passphrase (at least\n" +
			"12 bytes, from --passphrase-file or " + passphraseEnv + ") and manifest.json, written last,\n" +
			"which lists the snapshots the database refers to. The snapshot objects stay in their\n" +
			"bucket. Run it on a host with the worker's configuration; the deployment keeps running.\n\n" +
			"   cocoonbox admin backup --to s3://backups/cocoonbox --passphrase-file /root/backup.pass",
		Flags:  backupFlags(&cli.StringFlag{Name: "to", Usage: "s3://BUCKET/PREFIX: where the backup's folder goes", Required: true}),
		Action: runAdminBackup,
	}
}

func runAdminBackup(c *cli.Context) error {
	if _, err := positional(c, "", 0, 0); err != nil {
		return err
	}
	bucket, prefix, err := backup.ParseLocation("to", c.String("to"))
	if err != nil {
		return err
	}
	o, err := backupOptions(c, bucket)
	if err != nil {
		return err
	}
	o.Prefix = backup.Folder(prefix, time.Now())
	m, err := backup.Backup(c.Context, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "backup written to s3://%s/%s (key %s, %d snapshots listed)\n", bucket, o.Prefix, m.KeyID, len(m.Snapshots))
	return nil
}

// backupOptions reads the deployment's configuration as serve worker does, with the flags over
// it, and opens the snapshot bucket and the backups' bucket.
func backupOptions(c *cli.Context, backupBucket string) (backup.Options, error) {
	cfg, err := config.Load(c.String("config"), config.Env(), config.DefaultWorker(config.Env()))
	if err != nil {
		return backup.Options{}, err
	}
	for flag, dst := range map[string]*string{
		"home": &cfg.Home, "database-url": &cfg.Postgres.URL, "keyring": &cfg.Keyring,
		"s3-endpoint": &cfg.S3.Endpoint, "s3-bucket": &cfg.S3.Bucket,
	} {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	if cfg.Postgres.URL == "" {
		return backup.Options{}, cocoonbox.Invalid("database-url", "is required: the deployment's PostgreSQL (postgres.url, COCOONBOX_DATABASE_URL)")
	}
	pass, err := passphrase(c)
	if err != nil {
		return backup.Options{}, err
	}
	s3 := objstore.Config{Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region, Bucket: cfg.S3.Bucket,
		AccessKey: cfg.S3.AccessKey, SecretKey: cfg.S3.SecretKey, PathStyle: cfg.S3.PathStyle}
	snaps, err := objstore.NewS3(c.Context, s3, nil)
	if err != nil {
		return backup.Options{}, fmt.Errorf("s3: %w", err)
	}
	s3.Bucket = backupBucket
	target, err := objstore.NewS3(c.Context, s3, nil)
	if err != nil {
		return backup.Options{}, fmt.Errorf("s3: %w", err)
	}
	return backup.Options{
		DatabaseURL: cfg.Postgres.URL, Keyring: cfg.KeyringPath(), Passphrase: pass,
		Snapshots: snaps, Target: target, Log: c.App.ErrWriter,
	}, nil
}

// passphrase reads the keyring's passphrase from --passphrase-file (its first line) or the
// environment.
func passphrase(c *cli.Context) ([]byte, error) {
	if f := c.String("passphrase-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, cocoonbox.Invalid("passphrase-file", err.Error())
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return []byte(strings.TrimRight(line, "\r")), nil
	}
	if v, ok := config.Env()(passphraseEnv); ok && v != "" {
		return []byte(v), nil
	}
	return nil, cocoonbox.Invalid("passphrase-file", "is required (or "+passphraseEnv+"): the passphrase that seals the keyring in the backup")
}
