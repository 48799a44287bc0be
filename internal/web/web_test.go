package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
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
