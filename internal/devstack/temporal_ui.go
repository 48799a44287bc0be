package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/server_options"
)

// webUI is the Temporal Web UI served from this process.
type webUI struct {
	srv  *uiserver.Server
	done chan struct{}
	url  string
}

// startUI serves the Web UI on loopback:port, proxying to the frontend at frontendAddr, and
// waits until it answers. The UI server binds its own port and exits the process if that
// fails, so the caller checks the port just before calling.
func startUI(ctx context.Context, port int, frontendAddr, namespace string) (*webUI, error) {
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: frontendAddr,
		Host:                loopback,
		Port:                port,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		// Plain HTTP on loopback: the CSRF cookie must not be marked Secure.
		CORS: uiconfig.CORS{CookieInsecure: true},
		// No banner or request log on stdout, and no release-news calls to the internet.
		HideLogs:           true,
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure temporal ui: %w", err)
	}
	u := &webUI{
		srv:  uiserver.NewServer(server_options.WithConfigProvider(cfg)),
		done: make(chan struct{}),
		url:  "http://" + net.JoinHostPort(loopback, strconv.Itoa(port)),
	}
	go func() {
		defer close(u.done)
		_ = u.srv.Start() // returns nil once Stop closes it; exits the process on bind failure
	}()
	if err := waitHTTP(ctx, u.url+"/healthz"); err != nil {
		u.stop()
		return nil, fmt.Errorf("start temporal ui: %w", err)
	}
	return u, nil
}

// stop closes the UI server and waits for its serve loop to end, so the port is free when
// Stop returns.
func (u *webUI) stop() {
	u.srv.Stop()
	select {
	case <-u.done:
	case <-time.After(5 * time.Second):
	}
}

// waitHTTP polls url until it answers 200 or ctx ends.
func waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("build request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("get %s: status %s", url, resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", url, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
