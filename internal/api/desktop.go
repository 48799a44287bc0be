package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/rfb"
	"github.com/loomhand/cocoonbox/workflows"
)

// The desktop edge: GET /v1/boxes/{id}/desktop?mode=view|control upgrades to a WebSocket that
// carries the box's RFB (VNC) stream. The box's Xvnc has no password and trusts whoever reaches
// it, so the edge is where access is decided: a ticket from DesktopTicket (browsers cannot set
// headers on a WebSocket) or a bearer token (native clients) names the caller, the box's rules
// are checked again, and the client's half of the stream goes through the rfb filter, which
// forces shared sessions and in view mode drops input. The server's half passes untouched to a
// controller; to a viewer it is framed message by message, and the box's clipboard is dropped.

const (
	// desktopRecheck is how often an open connection checks its caller's access again, so a
	// revoked share or a control lease taken over ends it.
	desktopRecheck = 15 * time.Second
	// desktopReadLimit bounds one client message: the largest clipboard rfb.Filter passes, plus
	// room for its header.
	desktopReadLimit = 1<<20 + 1<<10
	// maxCloseReason is the most a WebSocket close frame's reason may hold, in bytes.
	maxCloseReason = 123
)

// desktopEdge counts the open desktop connections of this process, per box. (The one control
// connection a box may have is the box workflow's to give, so every API replica sees it.)
type desktopEdge struct {
	// source names this process in its viewer reports: each API process reports its own count,
	// and the box's workflow adds them up.
	source string
	mu     sync.Mutex
	open   map[cocoonbox.BoxID]int
	// controlling counts the open connections in control mode, among open: the box's workflow
	// releases a control lease whose holder has none for a while.
	controlling map[cocoonbox.BoxID]int
	// slots counts each box's connections from admission to the handler's end, for the cap.
	slots map[cocoonbox.BoxID]int
	// repeating marks the boxes whose viewer counts a repeatViewers goroutine repeats.
	repeating map[cocoonbox.BoxID]bool
	// report serialises viewer reports, each sending the count current when it is sent, so the
	// workflow's last word is the latest count whatever order the connections change in.
	report sync.Mutex
}

// newConnID names one control connection for the box's workflow.
func newConnID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "cc_" + hex.EncodeToString(b)
}

// viewerSource names this process in viewer reports: its host, and random bytes so that a
// restarted process's reports are not taken for its predecessor's.
func viewerSource() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "/" + hex.EncodeToString(b)
}

// reserve takes one of the box's max connection slots, or refuses with resource_exhausted
// naming the limit; release (safe to call twice) gives it back.
func (e *desktopEdge) reserve(id cocoonbox.BoxID, max int) (release func(), err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.slots[id] >= max {
		return nil, cocoonbox.Errorf(cocoonbox.EResourceExhausted, "box %s has %d open desktop connections, the limit (max_desktop_connections); close one and retry", id, max)
	}
	if e.slots == nil {
		e.slots = map[cocoonbox.BoxID]int{}
	}
	e.slots[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.slots[id]--; e.slots[id] <= 0 {
				delete(e.slots, id)
			}
		})
	}, nil
}

// add changes the box's count of open connections (and, for a control one, of control
// connections) by d, and says whether the caller is to start the box's repeater of viewer
// reports (none runs yet).
func (e *desktopEdge) add(id cocoonbox.BoxID, d int, control bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open == nil {
		e.open = map[cocoonbox.BoxID]int{}
		e.controlling = map[cocoonbox.BoxID]int{}
		e.repeating = map[cocoonbox.BoxID]bool{}
	}
	if control {
		if e.controlling[id] += d; e.controlling[id] <= 0 {
			delete(e.controlling, id)
		}
	}
	e.open[id] += d
	if e.open[id] <= 0 {
		delete(e.open, id)
		return false
	}
	if d > 0 && !e.repeating[id] {
		e.repeating[id] = true
		return true
	}
	return false
}

// keepRepeating says whether the box's repeater goes on: only while the box has connections;
// a repeater told to stop is forgotten, so the next connection starts another.
func (e *desktopEdge) keepRepeating(id cocoonbox.BoxID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open[id] > 0 {
		return true
	}
	delete(e.repeating, id)
	return false
}

// count is the box's number of open connections, and of those in control mode.
func (e *desktopEdge) count(id cocoonbox.BoxID) (open, control int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.open[id], e.controlling[id]
}

// repeatViewers reports the box's count every workflows.ViewersReportEvery until its last
// connection closes: the workflow forgets a count not repeated within its TTL, as that of a
// process that died. One runs per box with connections, however many there are.
func (s *Server) repeatViewers(id cocoonbox.BoxID) {
	tick := time.NewTicker(workflows.ViewersReportEvery)
	defer tick.Stop()
	for range tick.C {
		if !s.desktop.keepRepeating(id) {
			return
		}
		s.reportViewers(context.Background(), id)
	}
}

// reportViewers tells the box's workflow its current count of open connections, and of control
// ones.
func (s *Server) reportViewers(ctx context.Context, id cocoonbox.BoxID) {
	s.desktop.report.Lock()
	defer s.desktop.report.Unlock()
	open, control := s.desktop.count(id)
	s.boxes.SetViewers(ctx, id, s.desktop.source, open, control)
}

// serveDesktop authenticates, authorizes and dials before it upgrades, so every refusal is a
// plain HTTP error a client can read; after the upgrade it relays until either side ends.
func (s *Server) serveDesktop(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := cocoonbox.BoxID(r.PathValue("id"))
	if err := id.Validate(); err != nil {
		s.writeHTTPError(w, r, cocoonbox.RenameField(err, "box_id", "id"))
		return
	}
	q := r.URL.Query()
	mode := q.Get("mode")
	if mode == "" {
		mode = modeView
	}
	if err := validMode(mode); err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	caller, tokenID, ticket, err := s.edgeCaller(r, id, mode)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	// Admitted before the box is dialled, so connections over the cap cost no relay.
	release, err := s.desktop.reserve(id, s.maxDesktopConns)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	defer release()
	control := mode == modeControl
	// The ticket is spent while the box is dialled, which is most of a connection's start; a
	// refusal, a box that could not be reached or a busy control slot gives it back, so it
	// stays usable.
	spent := s.spendDuring(ctx, ticket)
	box, err := s.boxes.DialDesktop(ctx, caller, id, control)
	giveBack, spendErr := spent()
	if err == nil && spendErr != nil {
		_ = box.Close()
		err = spendErr
	}
	if err != nil {
		giveBack()
		s.writeHTTPError(w, r, err)
		return
	}
	defer func() { _ = box.Close() }()
	if control {
		conn := newConnID()
		if err := s.boxes.ClaimControl(ctx, id, s.desktop.source, conn); err != nil {
			giveBack()
			s.writeHTTPError(w, r, err)
			return
		}
		defer s.boxes.ReleaseControl(ctx, id, conn)
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return // Accept answered the client
	}
	defer func() { _ = ws.CloseNow() }()
	ws.SetReadLimit(desktopReadLimit)

	if s.desktop.add(id, 1, control) {
		go s.repeatViewers(id)
	}
	// A viewer's is sent after its first frame has had time to pass (boxsvc.DesktopSettle); each
	// report sends the count current when it is sent, so one that comes after the close reports
	// the close. A controller's goes at once: the box's control lease counts from it.
	if control {
		go s.reportViewers(ctx, id)
	} else {
		time.AfterFunc(boxsvc.DesktopSettle, func() { s.reportViewers(context.WithoutCancel(ctx), id) })
	}
	defer func() {
		s.desktop.add(id, -1, control)
		go s.reportViewers(ctx, id)
	}()
	s.log.InfoContext(ctx, "desktop connected", "box", id, "user", caller, "mode", mode)
	rfbMode := rfb.View
	if control {
		rfbMode = rfb.Control
	}
	code, reason := relayDesktop(ctx, ws, box, rfbMode, func(ctx context.Context) error {
		if err := s.checkToken(ctx, tokenID); err != nil {
			return err // a revoked token ends the connection, as a revoked share does
		}
		return s.boxes.CheckDesktop(ctx, caller, id, control)
	})
	s.log.InfoContext(ctx, "desktop closed", "box", id, "user", caller, "mode", mode, "status", code, "reason", reason)
}

// edgeCaller makes the checks a WebSocket edge (the desktop's, the terminal's) makes before any
// work: a WebSocket upgrade from this site, the caller of mode (see desktopCaller), and a server
// that serves boxes.
func (s *Server) edgeCaller(r *http.Request, id cocoonbox.BoxID, mode string) (caller, tokenID string, ticket *desktopTicket, err error) {
	if err := checkWebSocket(r); err != nil {
		return "", "", nil, err
	}
	if caller, tokenID, ticket, err = s.desktopCaller(r, id, mode, r.URL.Query().Get("ticket")); err != nil {
		return "", "", nil, err
	}
	if s.boxes == nil {
		return "", "", nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes")
	}
	return caller, tokenID, ticket, nil
}

// desktopCaller returns the user a request acts for and the ID of the token it rests on: the
// ticket's, when it carries one, which must name this box and mode (and is returned, to be
// spent once the desktop is reached); otherwise the bearer token's.
func (s *Server) desktopCaller(r *http.Request, id cocoonbox.BoxID, mode, ticket string) (string, string, *desktopTicket, error) {
	if ticket == "" {
		tok := httpBearer(r)
		if tok == "" {
			return "", "", nil, cocoonbox.Errorf(cocoonbox.EUnauthorized, "missing credential: add ?ticket= from DesktopTicket, or send authorization: Bearer <token>")
		}
		p, err := s.authorize(r.Context(), tok, routeDesktop+mode)
		if err != nil {
			return "", "", nil, err
		}
		return p.User.ID, p.Token.ID, nil, nil
	}
	keys, err := s.ticketKeys()
	if err != nil {
		return "", "", nil, err
	}
	t, err := openTicket(keys, ticket, time.Now())
	if err != nil {
		return "", "", nil, err
	}
	if t.Box != id {
		return "", "", nil, errBadTicket
	}
	if t.Mode != mode {
		return "", "", nil, cocoonbox.Errorf(cocoonbox.EForbidden, "the ticket is for %s mode, not %s: ask DesktopTicket for a %s ticket", t.Mode, mode, mode)
	}
	return t.User, t.Token, &t, nil
}

// checkWebSocket refuses, before any work, a request that is not a WebSocket upgrade or comes
// from a page of another site: a ticket is a bearer credential, and a same-site check keeps a
// page elsewhere from spending one it obtained. Requests without an Origin (native clients) pass.
func checkWebSocket(r *http.Request) error {
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") {
		return cocoonbox.Errorf(cocoonbox.EInvalid, "this is a WebSocket endpoint: send Connection: Upgrade and Upgrade: websocket")
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return cocoonbox.Errorf(cocoonbox.EForbidden, "origin %q may not open this server's desktops; open them from %s", origin, r.Host)
	}
	return nil
}

// headerHas reports whether a comma-separated header lists token, case-insensitively.
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// relayDesktop copies the box's bytes to the client, one binary message per read, and the
// client's messages through rfb.Filter to the box, until either side ends, the stream breaks the
// protocol, recheck refuses the caller, or ctx ends. It closes both and returns the WebSocket
// close status and reason it sent.
func relayDesktop(ctx context.Context, ws *websocket.Conn, box boxsvc.Conn, mode rfb.Mode, recheck func(context.Context) error) (websocket.StatusCode, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src := &wsReader{ctx: ctx, ws: ws}
	sess := rfb.NewSession(mode)
	up, down := make(chan error, 1), make(chan error, 1)
	go func() { _, err := sess.FilterClient(box, src); up <- err }()
	go func() {
		if mode == rfb.Control {
			down <- copyToClient(ctx, ws, box)
			return
		}
		down <- filterToClient(ctx, ws, box, sess)
	}()
	t := time.NewTicker(desktopRecheck)
	defer t.Stop()

	var code websocket.StatusCode
	var reason string
	upDone, downDone := false, false
	for code == 0 {
		select {
		case err := <-up:
			upDone = true
			code, reason = upClose(err, src)
		case err := <-down:
			downDone = true
			code, reason = downClose(err)
		case <-t.C:
			if err := recheck(ctx); err != nil && refusesAccess(err) {
				code, reason = websocket.StatusPolicyViolation, cocoonbox.ErrorMessage(err)
			}
		case <-ctx.Done():
			code, reason = websocket.StatusGoingAway, "the server is going away"
		}
	}
	_ = box.Close() // unblocks the filter's writes and copyToClient's reads
	reason = closeReason(reason)
	_ = ws.Close(code, reason)
	cancel()
	if !upDone {
		<-up
	}
	if !downDone {
		<-down
	}
	return code, reason
}

// errClientGone marks a failed write to the client: the client left, nothing to tell it.
type errClientGone struct{ err error }

func (e errClientGone) Error() string { return "write client: " + e.err.Error() }

// copyToClient sends each read of the box's stream as one binary message.
func copyToClient(ctx context.Context, ws *websocket.Conn, box io.Reader) error {
	buf := make([]byte, 256<<10) // a full frame is megabytes: fewer, larger messages
	for {
		n, err := box.Read(buf)
		if n > 0 {
			if werr := ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				return errClientGone{werr}
			}
		}
		if err != nil {
			return err
		}
	}
}

// filterToClient sends the box's stream to a view client through the session's server filter,
// which drops the clipboard; each batch it writes is one binary message.
func filterToClient(ctx context.Context, ws *websocket.Conn, box io.Reader, sess *rfb.Session) error {
	_, err := sess.FilterServer(wsWriter{ctx: ctx, ws: ws}, box)
	if err == nil {
		return io.EOF
	}
	return err
}

// wsWriter writes each Write as one binary message.
type wsWriter struct {
	ctx context.Context
	ws  *websocket.Conn
}

func (w wsWriter) Write(p []byte) (int, error) {
	if err := w.ws.Write(w.ctx, websocket.MessageBinary, p); err != nil {
		return 0, errClientGone{err}
	}
	return len(p), nil
}

// upClose is the close status for the end of the client's half.
func upClose(err error, src *wsReader) (websocket.StatusCode, string) {
	switch {
	case err == nil, src.closed:
		return websocket.StatusNormalClosure, ""
	case errors.Is(err, rfb.ErrProtocol):
		return websocket.StatusPolicyViolation, strings.TrimPrefix(err.Error(), rfb.ErrProtocol.Error()+": ")
	case errors.Is(err, errTextMessage):
		return websocket.StatusUnsupportedData, errTextMessage.Error()
	case src.err != nil:
		return websocket.StatusNormalClosure, "" // the client's side broke; it cannot hear us
	}
	return websocket.StatusInternalError, "the connection to the desktop failed"
}

// downClose is the close status for the end of the box's half.
func downClose(err error) (websocket.StatusCode, string) {
	var gone errClientGone
	switch {
	case errors.Is(err, io.EOF):
		return websocket.StatusNormalClosure, "the desktop ended the session"
	case errors.As(err, &gone):
		return websocket.StatusNormalClosure, ""
	case errors.Is(err, rfb.ErrProtocol):
		return websocket.StatusPolicyViolation, strings.TrimPrefix(err.Error(), rfb.ErrProtocol.Error()+": ")
	}
	return websocket.StatusInternalError, "the connection to the desktop failed"
}

// refusesAccess reports whether a recheck's error means the caller lost access, rather than
// that the check could not be made now.
func refusesAccess(err error) bool {
	switch cocoonbox.ErrorCode(err) {
	case cocoonbox.ENotFound, cocoonbox.EForbidden, cocoonbox.EConflict, cocoonbox.EUnauthorized:
		return true
	}
	return false
}

// closeReason cuts a reason to what a close frame holds, on a rune boundary.
func closeReason(s string) string {
	if len(s) <= maxCloseReason {
		return s
	}
	s = s[:maxCloseReason]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// errTextMessage refuses a text message: RFB is bytes, and noVNC sends binary.
var errTextMessage = errors.New("the desktop takes binary messages only")

// wsReader reads the client's binary messages as one byte stream. A client's close ends the
// stream cleanly (io.EOF); any other failure is kept in err.
type wsReader struct {
	ctx    context.Context
	ws     *websocket.Conn
	cur    io.Reader
	closed bool  // the client closed the WebSocket
	err    error // why reading the client failed
}

func (r *wsReader) Read(p []byte) (int, error) {
	for {
		if r.cur != nil {
			n, err := r.cur.Read(p)
			if err == io.EOF {
				r.cur = nil
				if n == 0 {
					continue
				}
				err = nil
			}
			if err != nil {
				r.err = err
			}
			return n, err
		}
		typ, rd, err := r.ws.Reader(r.ctx)
		if err != nil {
			if websocket.CloseStatus(err) != -1 {
				r.closed = true
				return 0, io.EOF
			}
			r.err = err
			return 0, err
		}
		if typ != websocket.MessageBinary {
			r.err = errTextMessage
			return 0, errTextMessage
		}
		r.cur = rd
	}
}
