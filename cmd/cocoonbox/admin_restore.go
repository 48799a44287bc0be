package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/backup"
)

func adminRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "restore a backup into an empty database and the keyring file, before the deployment starts",
		Description: "Reads the backup at --from (the folder admin backup printed), checks its manifest,\n" +
			"the passphrase and the dump's checksum, then loads the database into --database-url,\n" +
			"which must be empty, and writes the keyring to --keyring (refusing a file that holds\n" +
			"another key). The deployment it restores into has a new Temporal and new engines, so\n" +
			"every box comes back asleep and wakes from its newest snapshot; unfinished agent runs\n" +
			"fail saying why, and snapshots whose objects are gone from the bucket are marked failed.\n" +
			"Start the API and workers after it.\n\n" +
			"   cocoonbox admin restore --from s3://backups/cocoonbox/2026-12-05T10-00-00Z --passphrase-file /root/backup.pass",
		Flags:  backupFlags(&cli.StringFlag{Name: "from", Usage: "s3://BUCKET/PREFIX/FOLDER: the backup to restore", Required: true}),
		Action: runAdminRestore,
	}
}

func runAdminRestore(c *cli.Context) error {
	if _, err := positional(c, "", 0, 0); err != nil {
		return err
	}
	bucket, prefix, err := backup.ParseLocation("from", c.String("from"))
	if err != nil {
		return err
	}
	if prefix == "" {
		return cocoonbox.Invalid("from", "name the backup's folder: s3://BUCKET/PREFIX/FOLDER, as admin backup printed it")
	}
	o, err := backupOptions(c, bucket)
	if err != nil {
		return err
	}
	o.Prefix = prefix
	res, err := backup.Restore(c.Context, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "restored the backup of %s: %d boxes asleep, to wake from their snapshots; %d unfinished runs failed; %d snapshots lost\n",
		res.Manifest.CreatedAt.Format("2006-01-02 15:04:05Z07:00"), res.Boxes, res.Runs, len(res.LostSnapshots))
	return nil
}
