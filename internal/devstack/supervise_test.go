package devstack_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestKilledChildrenComeBack is the acceptance check for supervision: PostgreSQL, the S3 server,
// Temporal and the engine are SIGKILLed in turn under a running stack, as the OOM killer would; within
// 10 s /healthz is ok again and calls that need them work, without restarting the stack, and
// /healthz said what was going on meanwhile.
func TestKilledChildrenComeBack(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d := startDev(t, testConfig(t, shortTemp(t)))
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	works := map[string]func(context.Context) error{
		"postgres": func(context.Context) error { _, err := whoamiErr(cli.Endpoint, cli.Token); return err },
		"s3":       func(ctx context.Context) error { return d.Blobs.Check(ctx) },
		"temporal": func(ctx context.Context) error {
			_, err := d.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
		"engine": func(ctx context.Context) error {
			url, token := d.Sandbox()
			_, err := sandbox.NewHTTP(url, token, nil).List(ctx, "")
			return err
		},
	}
	for _, name := range []string{"postgres", "s3", "temporal", "engine"} {
		t.Run(name, func(t *testing.T) {
			pid := devstack.ChildPid(d, name)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			var seen string
			testutil.Eventually(t, 10*time.Second, "healthz ok and "+name+" working again", func() bool {
				_, ok, body, err := fetchHealth(d.URLs().API, cli.Token)
				if err != nil {
					body = err.Error()
				}
				seen = body
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				// Running too: a server may answer before its child has said it is ready. And a
				// new process: PostgreSQL's backends answer for a moment after their postmaster
				// is killed, before the supervisor has seen it die.
				return ok && works[name](ctx) == nil && d.Children()[name].State == "running" &&
					devstack.ChildPid(d, name) != pid
			}, &seen)
			t.Logf("%s back after %s", name, time.Since(killed).Round(time.Millisecond))
			st := d.Children()[name]
			if st.State != "running" || st.Restarts != 1 || st.LastExit != "signal: killed" {
				t.Errorf("supervision state %+v, want running after 1 restart from signal: killed", st)
			}
			if got := devstack.ChildPid(d, name); got == pid {
				t.Errorf("pid %d unchanged: not restarted", got)
			}
		})
	}
	select {
	case <-d.Done():
		t.Fatalf("the stack stopped: %v", d.Err())
	default:
	}
}
