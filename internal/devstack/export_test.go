package devstack

import (
	"context"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

// DatabaseURL is the store's URL, for tests that run a worker in a child process.
func DatabaseURL(d *Dev) string { return d.databaseURL() }

// SetAgent points the stack's agent runs at another gateway: the API's and the worker's
// configuration both.
func SetAgent(d *Dev, a config.Agent) {
	d.agentMu.Lock()
	defer d.agentMu.Unlock()
	d.cfg.Agent = a
	d.Boxes.Agent = a
}

// Keyring is the stack's master keyring, for the secret scan to unseal and derive what the
// stack's activities did.
func Keyring(d *Dev) *secrets.Keyring { return d.keys }

// ChildPid is the pid of a managed child ("postgres", "s3", "temporal", "engine"), for tests that kill it.
func ChildPid(d *Dev, name string) int {
	switch name {
	case "postgres":
		return d.pg.Pid()
	case "s3":
		return d.s3.Pid()
	case "engine":
		return d.engine.Process().Pid()
	case "temporal":
		return d.temporal.Process().Pid()
	}
	return 0
}

// StopS3 stops the S3 server and its supervision, as an outage that lasts would; StartS3
// brings it back, in place, and watches it again.
func StopS3(d *Dev) error {
	d.sups["s3"].Close()
	return d.s3.Stop()
}

// StartS3 starts the S3 server StopS3 stopped.
func StartS3(ctx context.Context, d *Dev) error {
	if err := d.s3.Restart(ctx); err != nil {
		return err
	}
	d.watch("s3", d.s3)
	return nil
}
