package tclient_test

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/tclient"
)

func TestOptions(t *testing.T) {
	o, err := tclient.Options(config.Temporal{Address: "127.0.0.1:7233"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.HostPort != "127.0.0.1:7233" || o.Namespace != "default" || o.ConnectionOptions.TLS != nil || o.Credentials != nil {
		t.Fatalf("loopback options: %+v", o)
	}
	o, err = tclient.Options(config.Temporal{Address: "ns.acct.tmprl.cloud:7233", Namespace: "ns.acct", APIKey: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.ConnectionOptions.TLS == nil || o.Credentials == nil || o.Namespace != "ns.acct" {
		t.Fatalf("an API key must turn on TLS and credentials: %+v", o)
	}
	if _, err := tclient.Options(config.Temporal{}, nil); err == nil || !strings.Contains(err.Error(), "temporal address") {
		t.Fatalf("empty address: %v", err)
	}
	_, err = tclient.Options(config.Temporal{Address: "x:1", TLSCAPath: "/nonexistent/ca.pem"}, nil)
	if err == nil || !strings.Contains(err.Error(), "temporal tls server ca") {
		t.Fatalf("missing CA: %v", err)
	}
}
