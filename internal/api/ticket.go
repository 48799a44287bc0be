package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

// A desktop ticket is what a browser presents to open a box's desktop, because a browser cannot
// set headers on a WebSocket. It is the JSON of desktopTicket sealed with the server's keyring
// (AES-GCM, so it can be neither forged nor read) and base64url-encoded without padding. It
// names one box, one user and one mode, lives a minute (long enough to open the WebSocket), and
// opens one connection: the edge spends its ID in the database when it accepts it, so a ticket
// leaked through a log or the address bar is worthless once used, on every API replica. Access is
// checked again when the ticket is used.
const (
	ticketTTL = 60 * time.Second
	// ticketAAD binds a sealed ticket to its purpose, so no other blob the keyring sealed (a
	// sandbox token, a user's secret) passes as a ticket, nor a ticket as one of them.
	ticketAAD = "cocoonbox-desktop-ticket"
)

// Desktop modes, as tickets and the edge's ?mode= name them; a terminal ticket opens the
// terminal edge instead.
const (
	modeView     = "view"
	modeControl  = "control"
	modeTerminal = "terminal"
	modePreview  = "preview" // a box port's preview, on its own host
)

// desktopTicket is a ticket's sealed content.
type desktopTicket struct {
	ID      string          `json:"id"` // random; spent on first use
	Box     cocoonbox.BoxID `json:"box"`
	User    string          `json:"user"`
	Token   string          `json:"tok"` // the token DesktopTicket was called with: revoking it ends the connection
	Mode    string          `json:"mode"`
	Port    int             `json:"port,omitempty"` // the port a preview ticket opens
	Expires time.Time       `json:"exp"`
}

// errBadTicket is the answer to a ticket that does not open: the caller learns nothing about why.
var errBadTicket = cocoonbox.Errorf(cocoonbox.EUnauthorized, "invalid desktop ticket: ask DesktopTicket for a new one")

// sealTicket seals t with keys.
func sealTicket(keys *secrets.Keyring, t desktopTicket) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("seal desktop ticket: %w", err)
	}
	blob, err := keys.Seal(b, []byte(ticketAAD))
	if err != nil {
		return "", fmt.Errorf("seal desktop ticket: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(blob), nil
}

// openTicket opens a ticket sealTicket made and checks that it is still valid at now and names a
// known mode. Every failure is unauthorized.
func openTicket(keys *secrets.Keyring, s string, now time.Time) (desktopTicket, error) {
	blob, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return desktopTicket{}, errBadTicket
	}
	b, err := keys.Open(blob, []byte(ticketAAD))
	if err != nil {
		return desktopTicket{}, errBadTicket
	}
	var t desktopTicket
	if err := json.Unmarshal(b, &t); err != nil || t.ID == "" || t.Box == "" || t.User == "" || t.Token == "" || (validMode(t.Mode) != nil && t.Mode != modeTerminal && t.Mode != modePreview) {
		return desktopTicket{}, errBadTicket
	}
	if !now.Before(t.Expires) {
		return desktopTicket{}, cocoonbox.Errorf(cocoonbox.EUnauthorized, "the desktop ticket expired: ask DesktopTicket for a new one")
	}
	return t, nil
}

// newTicket returns a fresh ticket for user, calling with token, to open box in mode, valid for
// ticketTTL from now.
func newTicket(box cocoonbox.BoxID, user, token, mode string, now time.Time) (desktopTicket, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return desktopTicket{}, fmt.Errorf("new desktop ticket: %w", err)
	}
	return desktopTicket{ID: hex.EncodeToString(id), Box: box, User: user, Token: token, Mode: mode, Expires: now.Add(ticketTTL).UTC()}, nil
}

// errTicketSpent is the answer to a ticket used before.
var errTicketSpent = cocoonbox.Errorf(cocoonbox.EUnauthorized, "the desktop ticket was already used: ask DesktopTicket for a new one")

// spendTicket records t's use: a ticket opens one connection.
func (s *Server) spendTicket(ctx context.Context, t desktopTicket) error {
	if s.store == nil {
		return errors.New("spend desktop ticket: no store")
	}
	first, err := s.store.SpendTicket(ctx, t.ID, t.Expires)
	if err != nil {
		return err
	}
	if !first {
		return errTicketSpent
	}
	return nil
}

// spendDuring spends ticket (none when nil) while the caller does something else, and returns
// the wait for it: its error, and giveBack, which makes a ticket spent here usable again for
// when what the caller did failed (a no-op otherwise, and best effort: a ticket it cannot give
// back is refused the next time, and the client asks for another).
func (s *Server) spendDuring(ctx context.Context, ticket *desktopTicket) (wait func() (giveBack func(), err error)) {
	if ticket == nil {
		return func() (func(), error) { return func() {}, nil }
	}
	done := make(chan error, 1)
	go func() { done <- s.spendTicket(ctx, *ticket) }()
	return func() (func(), error) {
		if err := <-done; err != nil {
			return func() {}, err
		}
		return func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := s.store.UnspendTicket(ctx, ticket.ID); err != nil {
				s.log.WarnContext(ctx, "give back a desktop ticket", "err", err)
			}
		}, nil
	}
}

// validMode checks a desktop mode's name.
func validMode(m string) error {
	if m != modeView && m != modeControl {
		return cocoonbox.Invalid("mode", fmt.Sprintf("must be %s or %s, got %q", modeView, modeControl, m))
	}
	return nil
}

// desktopPath is where the edge serves the box's desktop (or terminal), with the ticket that
// opens it.
func desktopPath(id cocoonbox.BoxID, mode, ticket string) string {
	if mode == modeTerminal {
		return "/v1/boxes/" + url.PathEscape(string(id)) + "/terminal?" + url.Values{"ticket": {ticket}}.Encode()
	}
	q := url.Values{"mode": {mode}, "ticket": {ticket}}
	return "/v1/boxes/" + url.PathEscape(string(id)) + "/desktop?" + q.Encode()
}

// ephemeralKeyring is the keyring of a server built without one: tickets then open only in the
// process that issued them, which is enough for a single process and fails closed otherwise.
func ephemeralKeyring() (*secrets.Keyring, error) {
	key := make([]byte, secrets.KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return secrets.NewKeyring(key)
}

// ticketKeys returns the keyring tickets are sealed with.
func (s *Server) ticketKeys() (*secrets.Keyring, error) {
	if s.keys == nil {
		return nil, errors.New("desktop tickets: no keyring")
	}
	return s.keys, nil
}
