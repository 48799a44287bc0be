package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// webhookEventPattern is what a webhook may ask for: a family (box.*, run.*) or one action.
var webhookEventPattern = regexp.MustCompile(`^(box|run)\.(\*|[a-z][a-z0-9_]*)$`)

// defaultWebhookEvents is what a webhook that names none hears.
var defaultWebhookEvents = []string{"box.*", "run.*"}

// maxWebhookURL bounds a webhook's URL.
const maxWebhookURL = 2048

// checkWebhookURL names what is wrong with a webhook URL.
func checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return cocoonbox.Invalid("url", "is required")
	case len(raw) > maxWebhookURL:
		return cocoonbox.Invalid("url", fmt.Sprintf("is longer than %d bytes", maxWebhookURL))
	case err != nil:
		return cocoonbox.Invalid("url", fmt.Sprintf("does not parse: %v", err))
	case u.Scheme != "http" && u.Scheme != "https":
		return cocoonbox.Invalid("url", fmt.Sprintf("must be http or https, got %q", u.Scheme))
	case u.Host == "":
		return cocoonbox.Invalid("url", "names no host")
	}
	return nil
}

// CreateWebhook registers a webhook for the caller's boxes and answers its secret, once.
func (a *accountService) CreateWebhook(ctx context.Context, req *cbv1.CreateWebhookRequest) (*cbv1.CreateWebhookResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkWebhookURL(req.GetUrl()); err != nil {
		return nil, err
	}
	events := req.GetEvents()
	if len(events) == 0 {
		events = defaultWebhookEvents
	}
	for i, e := range events {
		if !webhookEventPattern.MatchString(e) {
			return nil, cocoonbox.Invalid(fmt.Sprintf("events[%d]", i), fmt.Sprintf("must be box.*, run.* or an action such as box.hibernated, got %q", e))
		}
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := "whsec_" + hex.EncodeToString(raw)
	id := store.NewWebhookID()
	sealed, err := a.s.keys.Seal([]byte(secret), activities.WebhookSecretAAD(id))
	if err != nil {
		return nil, err
	}
	w, err := a.s.store.CreateWebhook(ctx, store.Webhook{ID: id, UserID: p.User.ID, URL: req.GetUrl(), SecretSealed: sealed, Events: events})
	if err != nil {
		return nil, err
	}
	a.s.audit(ctx, p.User.ID, "webhook.create", map[string]any{"webhook": id, "url": w.URL, "events": events})
	return &cbv1.CreateWebhookResponse{Webhook: webhookProto(w), Secret: secret}, nil
}

// ListWebhooks lists the caller's webhooks.
func (a *accountService) ListWebhooks(ctx context.Context, _ *cbv1.ListWebhooksRequest) (*cbv1.ListWebhooksResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	hooks, err := a.s.store.Webhooks(ctx, p.User.ID)
	if err != nil {
		return nil, err
	}
	out := &cbv1.ListWebhooksResponse{}
	for _, w := range hooks {
		out.Webhooks = append(out.Webhooks, webhookProto(w))
	}
	return out, nil
}

// DeleteWebhook removes one of the caller's webhooks.
func (a *accountService) DeleteWebhook(ctx context.Context, req *cbv1.DeleteWebhookRequest) (*cbv1.DeleteWebhookResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.s.store.DeleteWebhook(ctx, p.User.ID, req.GetId()); err != nil {
		return nil, err
	}
	a.s.audit(ctx, p.User.ID, "webhook.delete", map[string]any{"webhook": req.GetId()})
	return &cbv1.DeleteWebhookResponse{}, nil
}

// ListDeliveries returns one of the caller's webhooks' newest delivery attempts.
func (a *accountService) ListDeliveries(ctx context.Context, req *cbv1.ListDeliveriesRequest) (*cbv1.ListDeliveriesResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > 1000:
		return nil, cocoonbox.Invalid("limit", fmt.Sprintf("must be from 1 to 1000 (0: 100), got %d", limit))
	case limit == 0:
		limit = 100
	}
	w, err := a.s.store.WebhookByID(ctx, req.GetId())
	if err != nil || w.UserID != p.User.ID {
		return nil, cocoonbox.Errorf(cocoonbox.ENotFound, "webhook %q not found", req.GetId())
	}
	ds, err := a.s.store.Deliveries(ctx, w.ID, limit)
	if err != nil {
		return nil, err
	}
	out := &cbv1.ListDeliveriesResponse{}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, &cbv1.Delivery{EventId: d.EventID, Action: d.Action, Attempt: int32(d.Attempt),
			Status: int32(d.Status), Error: d.Error, At: ts(d.At)})
	}
	return out, nil
}

func webhookProto(w store.Webhook) *cbv1.Webhook {
	return &cbv1.Webhook{Id: w.ID, Url: w.URL, Events: w.Events, CreatedAt: ts(w.CreatedAt)}
}
