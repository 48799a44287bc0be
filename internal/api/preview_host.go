package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

// The preview on a host of its own: with a preview domain configured, p{port}-{box hex}.{domain}
// serves that box port's web server at its root, as its own origin, so a browser can open it
// (a page on the API's origin must be sandboxed away from the web app's storage; one on its own
// origin is simply the box's, cookies and all). A browser arrives with ?cocoonbox_ticket= from
// DesktopTicket{preview_port}; the ticket is spent and swapped for a session cookie sealed with
// the keyring and set for that host alone (HttpOnly, SameSite=Lax, 12 hours), the ticket dropped
// from the address by a redirect. The cookie names the user and the token it came from, so a
// revoked token or share ends it; it never reaches the box. Native clients may send a bearer
// token instead; a public port answers anyone while the box runs.

const (
	previewCookie      = "cocoonbox_preview"
	previewTicketParam = "cocoonbox_ticket"
	previewSessionTTL  = 12 * time.Hour
	// previewSessionAAD binds a sealed session to its purpose, as ticketAAD does tickets.
	previewSessionAAD = "cocoonbox-preview-session"
)

// previewSession is a preview cookie's sealed content.
type previewSession struct {
	Box     cocoonbox.BoxID `json:"box"`
	Port    int             `json:"port"`
	User    string          `json:"user"`
	Token   string          `json:"tok"`
	Expires time.Time       `json:"exp"`
}

// previewHostName is where port of box id is previewed under domain.
func previewHostName(id cocoonbox.BoxID, port int, domain string) string {
	return fmt.Sprintf("p%d-%s.%s", port, strings.TrimPrefix(string(id), "bx_"), domain)
}

// previewTarget reads a request's host as a preview host of the configured domain.
func (s *Server) previewTarget(host string) (cocoonbox.BoxID, int, bool) {
	if s.previewDomain == "" {
		return "", 0, false
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+s.previewDomain)
	if !ok {
		return "", 0, false
	}
	p, hex, ok := strings.Cut(strings.TrimPrefix(label, "p"), "-")
	if !ok || !strings.HasPrefix(label, "p") {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	id := cocoonbox.BoxID("bx_" + hex)
	if err != nil || id.Validate() != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return id, port, true
}

func (s *Server) servePreviewHost(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, port, _ := s.previewTarget(r.Host)
	if s.boxes == nil {
		s.writeHTTPError(w, r, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes"))
		return
	}
	if t := r.URL.Query().Get(previewTicketParam); t != "" {
		s.startPreviewSession(w, r, id, port, t)
		return
	}
	dial := func(ctx context.Context) (net.Conn, error) { return s.boxes.DialPublicPort(ctx, id, port) }
	if caller, err := s.previewCaller(r, id, port); err != nil {
		s.writeHTTPError(w, r, err)
		return
	} else if caller != "" {
		dial = func(ctx context.Context) (net.Conn, error) { return s.boxes.DialPort(ctx, caller, id, port) }
	}
	s.previewProxy(w, r.WithContext(ctx), port, r.URL.Path, false, dial)
}

// previewCaller is the user a preview-host request acts for: its session cookie's, else its
// bearer token's; "" for none (a public port may still answer).
func (s *Server) previewCaller(r *http.Request, id cocoonbox.BoxID, port int) (string, error) {
	keys, err := s.ticketKeys()
	if err != nil {
		return "", err
	}
	for _, c := range r.CookiesNamed(previewCookie) { // another host of the domain may have set one too
		sess, ok := openPreviewSession(keys, c.Value, time.Now())
		if !ok || sess.Box != id || sess.Port != port {
			continue
		}
		if err := s.checkToken(r.Context(), sess.Token); err != nil {
			return "", err
		}
		return sess.User, nil
	}
	if tok := httpBearer(r); tok != "" {
		p, err := s.authorize(r.Context(), tok, routePorts)
		if err != nil {
			return "", err
		}
		return p.User.ID, nil
	}
	return "", nil
}

// startPreviewSession swaps a preview ticket for a session cookie and sends the browser on to the
// address without the ticket.
func (s *Server) startPreviewSession(w http.ResponseWriter, r *http.Request, id cocoonbox.BoxID, port int, sealed string) {
	ctx := r.Context()
	keys, err := s.ticketKeys()
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	t, err := openTicket(keys, sealed, time.Now())
	if err == nil && (t.Box != id || t.Mode != modePreview || t.Port != port) {
		err = errBadTicket
	}
	if err == nil {
		err = s.checkToken(ctx, t.Token)
	}
	if err == nil {
		_, err = s.boxes.Authorize(ctx, t.User, id, cocoonbox.RoleViewer)
	}
	if err == nil {
		err = s.spendTicket(ctx, t)
	}
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	value, err := sealPreviewSession(keys, previewSession{Box: id, Port: port, User: t.User, Token: t.Token, Expires: time.Now().Add(previewSessionTTL).UTC()})
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: previewCookie, Value: value, Path: "/", MaxAge: int(previewSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	})
	u := *r.URL
	q := u.Query()
	q.Del(previewTicketParam)
	u.RawQuery = q.Encode()
	u.Scheme, u.Host = "", ""
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
}

func sealPreviewSession(keys *secrets.Keyring, sess previewSession) (string, error) {
	b, err := json.Marshal(sess)
	if err != nil {
		return "", fmt.Errorf("seal preview session: %w", err)
	}
	blob, err := keys.Seal(b, []byte(previewSessionAAD))
	if err != nil {
		return "", fmt.Errorf("seal preview session: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(blob), nil
}

func openPreviewSession(keys *secrets.Keyring, value string, now time.Time) (previewSession, bool) {
	blob, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return previewSession{}, false
	}
	b, err := keys.Open(blob, []byte(previewSessionAAD))
	if err != nil {
		return previewSession{}, false
	}
	var sess previewSession
	if json.Unmarshal(b, &sess) != nil || sess.User == "" || sess.Token == "" || !now.Before(sess.Expires) {
		return previewSession{}, false
	}
	return sess, true
}
