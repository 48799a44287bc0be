package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/web"
)

// TestServesTheApp: the page, its module and noVNC's entry module are served with the security
// headers, as ES modules a browser runs without a bundler.
func TestServesTheApp(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                                      `<script type="module" src="app.js">`,
		"/app.js":                                `import RFB from './novnc/core/rfb.js';`,
		"/novnc/core/rfb.js":                     "export default class RFB",
		"/novnc/vendor/pako/lib/zlib/inflate.js": "export",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if strings.HasSuffix(path, ".js") && !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
			t.Errorf("GET %s: Content-Type %q; browsers refuse modules without a JavaScript type", path, resp.Header.Get("Content-Type"))
		}
	}
}

// TestAgentPanel: the page carries the agent panel beside the desktop, with a label for every
// field and a live region for new steps, and the scripts look up only elements the page has, so
// a renamed ID fails here rather than as a silent null in the browser.
func TestAgentPanel(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	page := get(t, srv.URL+"/")
	for _, want := range []string{
		`<aside id="agent"`,
		`<label for="agent-task">`, `<textarea id="agent-task"`,
		`<button id="agent-run" type="submit">Run</button>`,
		`<label for="agent-runs">`, `<select id="agent-runs">`,
		`<span id="agent-state"`,
		`<ol id="agent-steps" aria-label="Steps" aria-live="polite"`,
		`<label for="agent-message">`, `<input id="agent-message"`,
		`<button id="agent-cancel"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("index.html lacks %s", want)
		}
	}
	if app := get(t, srv.URL+"/app.js"); !strings.Contains(app, `import { agentPanel } from './agent.js';`) {
		t.Error("app.js does not load the agent panel")
	}
	lookup := regexp.MustCompile(`\$\('([A-Za-z0-9_-]+)'\)`)
	for _, script := range []string{"/app.js", "/agent.js"} {
		for _, m := range lookup.FindAllStringSubmatch(get(t, srv.URL+script), -1) {
			if !strings.Contains(page, `id="`+m[1]+`"`) {
				t.Errorf("%s looks up #%s, which index.html lacks", script, m[1])
			}
		}
	}
}

// TestScriptsWriteTextNotMarkup: run tasks, model text and tool results are data from the box;
// the app's own scripts (noVNC aside) put nothing on the page as markup.
func TestScriptsWriteTextNotMarkup(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	for _, script := range []string{"/app.js", "/agent.js"} {
		body := get(t, srv.URL+script)
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(body, sink) {
				t.Errorf("%s uses %s", script, sink)
			}
		}
	}
}

// TestSecurityHeaders pins the policy: the agent panel needs nothing beyond same-origin calls.
func TestSecurityHeaders(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/agent.js")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; style-src 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("agent.js Content-Type %q; browsers refuse modules without a JavaScript type", ct)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// TestCSPConnectSelf: the page may open connections (fetch, and WebSockets to the desktop
// edge) to its own origin only, so a script injected through box data cannot send the token or
// the screen anywhere else; CSP Level 3's 'self' covers ws: and wss: of the same host.
func TestCSPConnectSelf(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	var connect string
	for d := range strings.SplitSeq(csp, ";") {
		if f := strings.Fields(d); len(f) > 0 && f[0] == "connect-src" {
			connect = strings.Join(f[1:], " ")
		}
	}
	if connect != "'self'" {
		t.Fatalf("CSP %q: connect-src is %q, want exactly 'self'", csp, connect)
	}
}

// TestInstallable: the page links a manifest a browser installs from (standalone, start URL,
// icons of 192 and 512 pixels that are PNGs of those sizes) and registers a service worker that
// keeps only the app's own files: never an API path.
func TestInstallable(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	get := func(path string) (*http.Response, []byte) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return resp, body
	}
	_, page := get("/")
	for _, want := range []string{`<link rel="manifest" href="manifest.webmanifest">`, `<meta name="theme-color"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	resp, body := get("/manifest.webmanifest")
	if ct := resp.Header.Get("Content-Type"); ct != "application/manifest+json" {
		t.Errorf("manifest Content-Type %q", ct)
	}
	var m struct {
		Name, StartURL, Display string
		Icons                   []struct{ Src, Sizes, Type string }
	}
	if err := json.Unmarshal(body, &struct {
		Name     *string                              `json:"name"`
		StartURL *string                              `json:"start_url"`
		Display  *string                              `json:"display"`
		Icons    *[]struct{ Src, Sizes, Type string } `json:"icons"`
	}{&m.Name, &m.StartURL, &m.Display, &m.Icons}); err != nil {
		t.Fatal(err)
	}
	if m.Name == "" || m.StartURL != "/" || m.Display != "standalone" || len(m.Icons) < 2 {
		t.Fatalf("manifest %+v", m)
	}
	sizes := map[string]bool{}
	for _, ic := range m.Icons {
		_, b := get("/" + ic.Src)
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil || ic.Type != "image/png" || fmt.Sprintf("%dx%d", cfg.Width, cfg.Height) != ic.Sizes {
			t.Errorf("icon %s: %v, %dx%d, want %s PNG", ic.Src, err, cfg.Width, cfg.Height, ic.Sizes)
		}
		sizes[ic.Sizes] = true
	}
	if !sizes["192x192"] || !sizes["512x512"] {
		t.Errorf("icon sizes %v, want 192x192 and 512x512", sizes)
	}
	_, app := get("/app.js")
	if !strings.Contains(string(app), "serviceWorker.register('/sw.js'") {
		t.Error("app.js does not register the service worker")
	}
	resp, sw := get("/sw.js")
	if resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("sw.js Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	for _, api := range []string{`"/v1/"`, `"/cocoonbox."`, `"/mcp"`} {
		if !strings.Contains(string(sw), api) {
			t.Errorf("sw.js does not keep %s out of its cache", api)
		}
	}
}
