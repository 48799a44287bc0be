package api

import (
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
)

// TestPreviewTarget: only p{port}-{16 hex}.{domain} is a preview host; the API's own host, other
// domains, bad ports and IDs are not, so they reach the API's routes as ever.
func TestPreviewTarget(t *testing.T) {
	s := &Server{previewDomain: "localhost:8420"}
	id := cocoonbox.BoxID("bx_0123456789abcdef")
	host := previewHostName(id, 8000, s.previewDomain)
	if host != "p8000-0123456789abcdef.localhost:8420" {
		t.Fatalf("previewHostName: %q", host)
	}
	if got, port, ok := s.previewTarget("P8000-0123456789ABCDEF.localhost:8420"); !ok || got != id || port != 8000 {
		t.Errorf("%q: %v %d %v", host, got, port, ok)
	}
	for _, h := range []string{
		"localhost:8420", "127.0.0.1:8420", "p8000-0123456789abcdef.localhost:8421", "p8000-0123456789abcdef.evil.com",
		"p0-0123456789abcdef.localhost:8420", "p70000-0123456789abcdef.localhost:8420", "p8000-0123.localhost:8420",
		"x8000-0123456789abcdef.localhost:8420", "p8000-0123456789abcdef.x.localhost:8420", "p-0123456789abcdef.localhost:8420",
	} {
		if _, _, ok := s.previewTarget(h); ok {
			t.Errorf("%q read as a preview host", h)
		}
	}
	if _, _, ok := (&Server{}).previewTarget(host); ok {
		t.Error("a server without a preview domain has preview hosts")
	}
}

// TestPreviewSession: a sealed session opens only with the same keyring, before it expires, and
// nothing else (a ticket sealed with the same keys) passes as one.
func TestPreviewSession(t *testing.T) {
	keys, err := ephemeralKeyring()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sess := previewSession{Box: "bx_0123456789abcdef", Port: 8000, User: "us_1", Token: "tk_1", Expires: now.Add(time.Hour).UTC()}
	v, err := sealPreviewSession(keys, sess)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := openPreviewSession(keys, v, now); !ok || got != sess {
		t.Errorf("open: %+v %v", got, ok)
	}
	if _, ok := openPreviewSession(keys, v, now.Add(2*time.Hour)); ok {
		t.Error("an expired session opened")
	}
	other, _ := ephemeralKeyring()
	if _, ok := openPreviewSession(other, v, now); ok {
		t.Error("a session opened with another keyring")
	}
	tk, _ := newTicket("bx_0123456789abcdef", "us_1", "tk_1", modePreview, now)
	sealed, _ := sealTicket(keys, tk)
	if _, ok := openPreviewSession(keys, sealed, now); ok {
		t.Error("a ticket passed as a session")
	}
}
