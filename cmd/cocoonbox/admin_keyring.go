package main

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

// adminKeyringCommand is `cocoonbox admin keyring`: the deployment's master key file, which only
// this command creates outside `cocoonbox dev` (serve api and serve worker refuse to start
// without it rather than make a key of their own).
func adminKeyringCommand() *cli.Command {
	return &cli.Command{
		Name:  "keyring",
		Usage: "the master key file that seals sandbox tokens and vault secrets",
		Subcommands: []*cli.Command{{
			Name:  "init",
			Usage: "create the deployment's master key file, once, on its first host",
			Description: "Writes a new random key, mode 0600, to --keyring (default <home>/keys/master.key,\n" +
				"where serve api and serve worker read it) and refuses a file that exists. Copy the file\n" +
				"to every API and worker host of the deployment and back it up: without it no stored\n" +
				"sandbox token or secret can be opened. `cocoonbox dev` makes its own.",
			Flags:  keyringFlags(),
			Action: runAdminKeyringInit,
		}, {
			Name:  "rotate",
			Usage: "make a new primary key: new secrets are sealed with it, the old keys still open what they sealed",
			Description: "Puts a new random key first in --keyring (the file is replaced whole, mode 0600); the\n" +
				"older keys stay in it, so everything sealed before still opens. Run it on one host, then\n" +
				"copy the file to every API and worker host and restart their roles (workers first). Each\n" +
				"worker then seals every stored sandbox token, vault secret and webhook secret again under\n" +
				"the new key, in the background (its log says how many). Boxes' agent credentials, derived\n" +
				"from the first key the deployment had, do not change. Back up the new file.",
			Flags:  keyringFlags(),
			Action: runAdminKeyringRotate,
		}},
	}
}

func runAdminKeyringInit(c *cli.Context) error {
	path, err := keyringPath(c)
	if err != nil {
		return err
	}
	k, err := secrets.CreateKeyring(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "created keyring %s (key %s, mode 0600): copy it to every API and worker host and back it up\n", path, k.KeyID())
	return nil
}

func runAdminKeyringRotate(c *cli.Context) error {
	path, err := keyringPath(c)
	if err != nil {
		return err
	}
	k, err := secrets.RotateKeyring(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "rotated keyring %s: new primary key %s, %d older kept to open what they sealed\n"+
		"copy it to every API and worker host and restart their roles, workers first; the workers then seal stored secrets again under the new key\n",
		path, k.KeyID(), k.KeyCount()-1)
	return nil
}

// keyringFlags name the key file the keyring commands work on.
func keyringFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
		&cli.StringFlag{Name: "keyring", Usage: "master key file (default <home>/keys/master.key)"},
	}
}

// keyringPath is the key file the keyring commands work on: the one serve worker reads (its config
// file and environment), or --home and --keyring.
func keyringPath(c *cli.Context) (string, error) {
	if _, err := positional(c, "", 0, 0); err != nil {
		return "", err
	}
	cfg, err := config.Load(c.String("config"), config.Env(), config.DefaultWorker(config.Env()))
	if err != nil {
		return "", err
	}
	if c.IsSet("home") {
		cfg.Home = c.String("home")
	}
	if c.IsSet("keyring") {
		cfg.Keyring = c.String("keyring")
	}
	return filepath.Abs(cfg.KeyringPath())
}
