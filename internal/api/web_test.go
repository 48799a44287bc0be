package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/api"
)

// TestServesWebAppBesideAPI: the browser app answers at / on the API port without shadowing the
// other routes, and refuses methods other than GET and HEAD.
func TestServesWebAppBesideAPI(t *testing.T) {
	f := serveOpts(t, api.Options{})
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+f.addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/"); code != 200 || !strings.Contains(body, "<title>cocoonbox</title>") {
		t.Fatalf("GET /: %d %.80q", code, body)
	}
	if code, body := get("GET", "/healthz"); code == 404 || strings.Contains(body, "<title>") {
		t.Fatalf("GET /healthz went to the web app: %d", code)
	}
	if code, _ := get("POST", "/mcp"); code != 401 {
		t.Fatalf("POST /mcp without a token: %d, want 401 (not the web app)", code)
	}
	if code, _ := get("DELETE", "/index.html"); code != 405 {
		t.Fatalf("DELETE /index.html: %d, want 405", code)
	}
}
