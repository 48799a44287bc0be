package devstack

import (
	"context"
	"net"
	"testing"

	"github.com/loomhand/cocoonbox/internal/app"
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

// StartAPIReplica serves a second API over d's services until the test ends, with a box service
// and a desktop edge of its own, as another `serve api` process of the deployment has, and
// returns its URL.
func StartAPIReplica(t testing.TB, d *Dev) string {
	t.Helper()
	boxes := app.Boxes(d.parts, d.cfg.Agent, d.cfg.Quota, d.cfg.DefaultBoxNetwork(), d.cfg.BoxPolicy)
	srv := app.API(d.parts, boxes, app.APIOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = srv.Serve(ctx, ln)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return "http://" + ln.Addr().String()
}
