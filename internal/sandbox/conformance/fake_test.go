package conformance_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/conformance"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

// TestFake runs the suite against sandboxtest's fake, so the suite itself is exercised before an
// engine exists and the fake is held to the contract it claims to speak.
func TestFake(t *testing.T) {
	const root, tenant = "root-token", "tenant-token"
	f := sandboxtest.New(t, sandboxtest.Options{RootToken: root, Tenants: map[string]string{tenant: "acme"}})
	if !f.Isolated() {
		// The suite writes /root and /tmp inside boxes; without namespaces that would be the host's.
		t.Skip("sandboxtest cannot give boxes their own namespaces here (needs root or unprivileged user namespaces)")
	}
	conformance.Run(t, conformance.Harness{
		Root:       f.Client(root),
		Tenant:     f.Client(tenant),
		WithToken:  func(token string) sandbox.Client { return f.Client(token) },
		URL:        f.URL,
		RootToken:  root,
		HTTPClient: &http.Client{Timeout: time.Minute},
		Template:   "base",
		Size:       sandbox.SizeSmall,
		RestartEngine: func(t *testing.T) {
			if err := f.Restart(); err != nil {
				t.Fatal(err)
			}
		},
	})
}
