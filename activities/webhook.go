package activities

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// WebhookStore is what delivering a webhook reads and records.
type WebhookStore interface {
	WebhookByID(ctx context.Context, id string) (store.Webhook, error)
	EventByID(ctx context.Context, id int64) (store.Event, error)
	AddDelivery(ctx context.Context, d store.Delivery) error
}

// Webhooks delivers box and run events to the webhooks their owners registered, signed with each
// webhook's secret.
type Webhooks struct {
	Store WebhookStore
	// Open unseals a webhook's secret (sealed under AAD WebhookSecretAAD(id)).
	Open func(sealed, aad []byte) ([]byte, error)
	// Client posts the deliveries; nil is WebhookClient(false).
	Client *http.Client
}

// WebhookSecretAAD binds a webhook's sealed secret to the webhook.
func WebhookSecretAAD(id string) []byte { return []byte("webhook:" + id) }

// DeliverInput names one event for one webhook.
type DeliverInput struct {
	WebhookID string
	EventID   int64
}

// WebhookPayload is the JSON body of a delivery.
type WebhookPayload struct {
	Delivery string          `json:"delivery"` // <webhook>/<event>: the same on every retry
	EventID  int64           `json:"event_id"`
	Action   string          `json:"action"`
	BoxID    string          `json:"box_id"`
	Actor    string          `json:"actor"`
	Detail   json.RawMessage `json:"detail"`
	At       time.Time       `json:"at"`
}

// SignatureHeader carries a delivery's signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>" under the webhook's secret>.
const SignatureHeader = "X-Cocoonbox-Signature"

// Sign is a delivery's signature header value at t.
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Deliver posts one event to one webhook and records the attempt. A receiver that answers 2xx
// has it; anything else is retried by the workflow's policy (a 4xx other than 408 and 429 is
// not: the receiver refuses it). A webhook deleted meanwhile delivers nothing.
func (a *Webhooks) Deliver(ctx context.Context, in DeliverInput) error {
	hook, err := a.Store.WebhookByID(ctx, in.WebhookID)
	if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
		return nil
	}
	if err != nil {
		return classify(err)
	}
	ev, err := a.Store.EventByID(ctx, in.EventID)
	if err != nil {
		return classify(err)
	}
	secret, err := a.Open(hook.SecretSealed, WebhookSecretAAD(hook.ID))
	if err != nil {
		return newError(ErrTypeInternal, fmt.Errorf("open webhook %s secret: %w", hook.ID, err))
	}
	body, err := json.Marshal(WebhookPayload{
		Delivery: hook.ID + "/" + strconv.FormatInt(ev.ID, 10), EventID: ev.ID, Action: ev.Action, BoxID: ev.BoxID,
		Actor: ev.Actor, Detail: ev.Detail, At: ev.At.UTC(),
	})
	if err != nil {
		return classify(err)
	}
	client := a.Client
	if client == nil {
		client = WebhookClient(false)
	}
	pctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return newError(ErrTypeInvalidArgument, fmt.Errorf("webhook %s: %w", hook.ID, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cocoonbox-webhook")
	req.Header.Set("X-Cocoonbox-Event", ev.Action)
	req.Header.Set("X-Cocoonbox-Delivery", hook.ID+"/"+strconv.FormatInt(ev.ID, 10))
	req.Header.Set(SignatureHeader, Sign(secret, body, time.Now()))
	d := store.Delivery{WebhookID: hook.ID, EventID: ev.ID, Action: ev.Action, Attempt: int(activity.GetInfo(ctx).Attempt)}
	resp, err := client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		d.Status = resp.StatusCode
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("the receiver answered %s", resp.Status)
		}
	}
	if err != nil {
		d.Error = err.Error()
	}
	if rerr := a.Store.AddDelivery(ctx, d); rerr != nil {
		activity.GetLogger(ctx).Warn("record webhook delivery", "webhook", hook.ID, "error", rerr)
	}
	switch {
	case err == nil:
		return nil
	case d.Status >= 400 && d.Status < 500 && d.Status != http.StatusRequestTimeout && d.Status != http.StatusTooManyRequests:
		return newError(ErrTypeInvalidArgument, fmt.Errorf("webhook %s: %w", hook.ID, err))
	}
	return newError(ErrTypeUnavailable, fmt.Errorf("webhook %s: %w", hook.ID, err))
}

// webhookTimeout bounds one delivery: the receiver's answer, not its work.
const webhookTimeout = 10 * time.Second

// ErrPrivateAddress is a webhook URL that reaches this deployment's own network.
var ErrPrivateAddress = errors.New("the address is loopback, private or link-local, which webhooks may not reach")

// WebhookClient is the HTTP client deliveries go through: no proxy, no redirects, and, unless
// allowPrivate, no connection to a loopback, private, link-local or unspecified address, checked
// on the address dialled (after DNS), so a user's URL cannot reach the deployment's own services.
func WebhookClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook dial %s: %w", address, err)
			}
			ip := ap.Addr().Unmap()
			if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
				ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
				return fmt.Errorf("webhook dial %s: %w", address, ErrPrivateAddress)
			}
			return nil
		}
	}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil, ResponseHeaderTimeout: webhookTimeout,
			MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
