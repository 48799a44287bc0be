package devstack

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/temporalio/ui-server/v2/server/api"
	"github.com/temporalio/ui-server/v2/server/auth"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/cors"
	"github.com/temporalio/ui-server/v2/server/csrf"
	"github.com/temporalio/ui-server/v2/server/headers"
	"github.com/temporalio/ui-server/v2/server/route"
	"github.com/temporalio/ui-server/v2/ui"
)

// uiOptions configures the Web UI.
type uiOptions struct {
	listener     net.Listener // loopback; the UI serves on it and closes it at stop
	frontendAddr string
	namespace    string
	// tls, when set, is the client certificate the UI server dials the frontend with, and
	// login is the token a browser must present first. Both nil/empty: plain and open.
	tls   *serverTLS
	login *uiLogin
}

// webUI is the Temporal Web UI served from this process.
type webUI struct {
	srv  *http.Server
	cfg  *uiconfig.ConfigProviderWithRefresh
	done chan struct{}
	url  string
}

// startUI serves the Web UI, proxying to the frontend, and waits until it answers. It assembles
// the UI server's routes itself, rather than calling its Start, so that the UI serves on our
// listener behind our login and a serve error is returned rather than exiting the process.
func startUI(ctx context.Context, o uiOptions) (*webUI, error) {
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: o.frontendAddr,
		Host:                loopback,
		Port:                o.listener.Addr().(*net.TCPAddr).Port,
		EnableUI:            true,
		DefaultNamespace:    o.namespace,
		// Plain HTTP on loopback: the CSRF cookie must not be marked Secure.
		CORS: uiconfig.CORS{CookieInsecure: true},
		// No request log on stdout, and no release-news calls to the internet.
		HideLogs:           true,
		DisableNewsFetch:   true,
		NotifyOnNewVersion: false,
	}
	if o.tls != nil {
		cfg.TLS = uiconfig.TLS{
			CaFile: o.tls.CAPath(), CertFile: o.tls.ClientCertPath(), KeyFile: o.tls.ClientKeyPath(),
			ServerName: TemporalServerName, EnableHostVerification: true,
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure temporal ui: %w", err)
	}
	provider, err := uiconfig.NewConfigProviderWithRefresh(cfg)
	if err != nil {
		return nil, fmt.Errorf("configure temporal ui: %w", err)
	}
	e, err := uiRoutes(provider)
	if err != nil {
		provider.Close()
		return nil, fmt.Errorf("configure temporal ui: %w", err)
	}
	var h http.Handler = e
	if o.login != nil {
		h = o.login.wrap(e)
	}
	u := &webUI{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		cfg:  provider,
		done: make(chan struct{}),
		url:  "http://" + o.listener.Addr().String(),
	}
	go func() {
		defer close(u.done)
		_ = u.srv.Serve(o.listener) // returns once stop closes the server
	}()
	if err := waitHTTP(ctx, u.url+"/healthz"); err != nil {
		u.stop()
		return nil, fmt.Errorf("start temporal ui: %w", err)
	}
	return u, nil
}

// uiRoutes is the UI server's handler as its NewServer builds it, less the OIDC login routes:
// the login in front of it is ours.
func uiRoutes(cfg *uiconfig.ConfigProviderWithRefresh) (*echo.Echo, error) {
	c, err := cfg.GetConfig()
	if err != nil {
		return nil, err
	}
	assets, err := ui.Assets()
	if err != nil {
		return nil, err
	}
	if assets, err = fs.Sub(assets, "local"); err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	e.Use(middleware.Gzip())
	e.Use(cors.CORSMiddleware(cors.CORSConfig{
		AllowHeaders: []string{
			echo.HeaderOrigin, echo.HeaderContentType, echo.HeaderAccept,
			echo.HeaderXCSRFToken, echo.HeaderAuthorization, auth.AuthorizationExtrasHeader, "Caller-Type",
		},
		AllowCredentials: true,
		ConfigProvider:   cfg,
	}))
	e.Use(middleware.Secure())
	secure := !c.CORS.CookieInsecure
	e.Use(csrf.EnsureTokenCookie(secure))
	e.Use(middleware.CSRFWithConfig(csrf.MiddlewareConfig(cfg, secure)))
	e.Pre(route.PublicPath(c.PublicPath))
	route.SetHealthRoute(e)
	forward := []api.Middleware{headers.WithForwardHeaders([]string{auth.AuthorizationExtrasHeader, "Caller-Type"})}
	if err := route.SetAPIRoutes(e, cfg, forward); err != nil {
		return nil, err
	}
	if err := route.SetUIRoutes(e, c.PublicPath, assets, cfg); err != nil {
		return nil, err
	}
	route.SetRenderRoute(e, "/")
	return e, nil
}

// stop closes the UI server and waits for its serve loop to end, so the port is free when
// Stop returns.
func (u *webUI) stop() {
	_ = u.srv.Close()
	<-u.done
	u.cfg.Close()
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
