package devstack_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestWebhooks: a receiver registered for box.hibernated gets the hibernate's event, signed with
// the secret shown at creation; the receiver failing at first is retried with backoff until it
// answers, and the delivery log shows each attempt and answer. Bad input names the field.
func TestWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Webhooks.AllowPrivate = true // the receiver is on loopback, like the test
	cfg.Webhooks.RetryFirst = time.Second
	e, ctx, tok := hostileEnv(t, cfg)
	as := e.as(ctx, tok)
	acct := cbv1.NewAccountServiceClient(e.conn)

	type got struct {
		body      []byte
		signature string
		event     string
	}
	var mu sync.Mutex
	var received []got
	calls := 0
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		received = append(received, got{body, r.Header.Get(activities.SignatureHeader), r.Header.Get("X-Cocoonbox-Event")})
	}))
	t.Cleanup(rcv.Close)

	for field, req := range map[string]*cbv1.CreateWebhookRequest{
		"url":       {Url: "ftp://example.com/hook"},
		"events[1]": {Url: rcv.URL, Events: []string{"box.*", "snapshot.taken"}},
	} {
		if _, err := acct.CreateWebhook(as, req); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), field+":") {
			t.Errorf("CreateWebhook(%v) = %v; want invalid naming %s", req, err, field)
		}
	}
	hook, err := acct.CreateWebhook(as, &cbv1.CreateWebhookRequest{Url: rcv.URL, Events: []string{"box.hibernated", "run.*"}})
	if err != nil || !strings.HasPrefix(hook.GetSecret(), "whsec_") {
		t.Fatalf("create webhook: %v, %v", hook, err)
	}
	id := hook.GetWebhook().GetId()

	b, err := e.box.CreateBox(as, &cbv1.CreateBoxRequest{Name: "hooked", Size: "small"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.box.HibernateBox(as, &cbv1.HibernateBoxRequest{Box: b.GetId()}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(received) == 0 {
			return errWait("no delivery yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	d := received[0]
	mu.Unlock()
	var p activities.WebhookPayload
	if err := json.Unmarshal(d.body, &p); err != nil || p.Action != "box.hibernated" || p.BoxID != b.GetId() || d.event != "box.hibernated" {
		t.Fatalf("delivery %s (%q): %+v, %v", d.body, d.event, p, err)
	}
	ts, _, _ := strings.Cut(strings.TrimPrefix(d.signature, "t="), ",")
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		t.Fatalf("signature %q: %v", d.signature, err)
	}
	at := time.Unix(secs, 0)
	if want := activities.Sign([]byte(hook.GetSecret()), d.body, at); d.signature != want {
		t.Fatalf("signature %q, want %q", d.signature, want)
	}
	if wrong := activities.Sign([]byte("whsec_other"), d.body, at); d.signature == wrong {
		t.Fatal("the signature does not depend on the secret")
	}

	log, err := acct.ListDeliveries(as, &cbv1.ListDeliveriesRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var attempts []string
	for _, dl := range log.GetDeliveries() {
		if dl.GetEventId() == p.EventID {
			attempts = append(attempts, http.StatusText(int(dl.GetStatus())))
		}
	}
	if len(attempts) != 3 || attempts[0] != "OK" || attempts[1] != "Service Unavailable" || attempts[2] != "Service Unavailable" {
		t.Fatalf("delivery log of event %d: %q; want two refusals then the delivery, newest first", p.EventID, attempts)
	}
	if _, err := acct.ListDeliveries(as, &cbv1.ListDeliveriesRequest{Id: "wh_nosuchwebhookatall0"}); status.Code(err) != codes.NotFound {
		t.Fatalf("deliveries of an unknown webhook: %v", err)
	}
	if _, err := acct.DeleteWebhook(as, &cbv1.DeleteWebhookRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if hooks, err := acct.ListWebhooks(as, &cbv1.ListWebhooksRequest{}); err != nil || len(hooks.GetWebhooks()) != 0 {
		t.Fatalf("webhooks after delete: %v, %v", hooks, err)
	}
}

// errWait is a Poll condition not met yet.
type errWait string

func (e errWait) Error() string { return string(e) }
