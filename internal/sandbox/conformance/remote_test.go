package conformance_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/conformance"
)

// TestRemote runs the suite against a real sandboxd when SANDBOXD_URL and SANDBOXD_TOKEN (its
// root api_token) are set; there is none in CI, so it skips there. Optional:
// SANDBOXD_TENANT_TOKEN (tenant checks), SANDBOXD_TEMPLATE (default "base:24.04", upstream's
// example; it needs sh, coreutils and perl) and SANDBOXD_SIZE (default small). The suite claims a
// handful of sandboxes and releases them; it never changes pools.
func TestRemote(t *testing.T) {
	url, token := os.Getenv("SANDBOXD_URL"), os.Getenv("SANDBOXD_TOKEN")
	if url == "" || token == "" {
		t.Skip("SANDBOXD_URL and SANDBOXD_TOKEN are not set: no upstream sandboxd to check")
	}
	hc := &http.Client{Timeout: 5 * time.Minute}
	client := func(tok string) sandbox.Client { return sandbox.NewHTTP(url, tok, hc) }
	h := conformance.Harness{
		Root:       client(token),
		WithToken:  client,
		URL:        url,
		RootToken:  token,
		HTTPClient: hc,
		Template:   envOr("SANDBOXD_TEMPLATE", "base:24.04"),
		Size:       envOr("SANDBOXD_SIZE", sandbox.SizeSmall),
	}
	if tt := os.Getenv("SANDBOXD_TENANT_TOKEN"); tt != "" {
		h.Tenant = client(tt)
	}
	conformance.Run(t, h)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
