package health_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/health"
)

// TestStartupWaitsAndReports: Wait tries again until the dependency answers, and meanwhile Err
// names the dependency with the last try's error; a Checker reports "starting" with that error
// until Done, whatever its checks say, and its gauges say which component is down.
func TestStartupWaitsAndReports(t *testing.T) {
	var start health.Startup
	c := &health.Checker{Starting: start.Err, Checks: map[string]health.Check{
		"postgres": func(context.Context) error { return nil },
		"s3":       func(context.Context) error { return errors.New("connection refused") },
	}}
	tries := 0
	var during []string
	err := start.Wait(context.Background(), slog.New(slog.DiscardHandler), "PostgreSQL", func(context.Context) error {
		tries++
		if tries > 1 {
			during = append(during, start.Err().Error(), c.Report(context.Background()).Status)
		}
		if tries < 3 {
			return errors.New("connection refused")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("Wait = %v after %d tries, want nil after 3", err, tries)
	}
	if want := []string{"waiting for PostgreSQL: connection refused", "starting"}; len(during) != 4 || during[0] != want[0] || during[1] != want[1] {
		t.Errorf("while waiting: %q, want Err %q and status %q", during, want[0], want[1])
	}
	if err := start.Err(); err == nil {
		t.Error("Err is nil before Done")
	}
	start.Done()
	rep := c.Report(context.Background())
	if start.Err() != nil || rep.Status != health.StatusDegraded || rep.Components["s3"] != "connection refused" {
		t.Errorf("after Done: Err %v, report %+v; want nil and degraded by s3", start.Err(), rep)
	}
	var b strings.Builder
	health.WriteMetrics(&b, rep)
	for _, line := range []string{`cocoonbox_component_up{component="postgres"} 1`, `cocoonbox_component_up{component="s3"} 0`, "cocoonbox_starting 0"} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, b.String())
		}
	}
}

// TestStartupWaitEndsWithItsContext: a role stopped while it waits stops waiting.
func TestStartupWaitEndsWithItsContext(t *testing.T) {
	var start health.Startup
	ctx, cancel := context.WithCancel(context.Background())
	err := start.Wait(ctx, slog.New(slog.DiscardHandler), "Temporal", func(context.Context) error {
		cancel()
		return errors.New("connection refused")
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
}
