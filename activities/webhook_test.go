package activities_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/loomhand/cocoonbox/activities"
)

// TestWebhookClientRefusesPrivateAddresses: a webhook URL cannot reach the deployment's own
// network (here: a server on loopback) unless the operator allows it.
func TestWebhookClientRefusesPrivateAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, err := activities.WebhookClient(false).Post(srv.URL, "application/json", nil)
	if !errors.Is(err, activities.ErrPrivateAddress) {
		t.Fatalf("a delivery to loopback: %v; want it refused", err)
	}
	resp, err := activities.WebhookClient(true).Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatalf("with private addresses allowed: %v", err)
	}
	_ = resp.Body.Close()
}
