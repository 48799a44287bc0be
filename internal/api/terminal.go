package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// The terminal edge: GET /v1/boxes/{id}/terminal?ticket=…&rows=R&cols=C upgrades to a WebSocket
// carrying a login shell in the box on a pseudo-terminal of R×C (default 24×80), for the web
// app's terminal. Binary messages are the terminal's bytes, typed (client to box) and shown (box
// to client); text messages are JSON controls: {"resize":{"rows":R,"cols":C}} from the client,
// {"exit":N} from the edge when the shell ends, before a normal close. Access is a terminal ticket
// from DesktopTicket (or a bearer token, for native clients), the driver role, checked again while
// the connection lasts, as the desktop's is.

// terminalReadLimit bounds one client message: a paste of 256 KiB.
const terminalReadLimit = 256 << 10

// terminalControl is a text message of the terminal edge.
type terminalControl struct {
	Resize *struct {
		Rows int `json:"rows"`
		Cols int `json:"cols"`
	} `json:"resize,omitempty"`
}

func (s *Server) serveTerminal(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := cocoonbox.BoxID(r.PathValue("id"))
	if err := id.Validate(); err != nil {
		s.writeHTTPError(w, r, cocoonbox.RenameField(err, "box_id", "id"))
		return
	}
	size := boxsvc.WindowSize{Rows: 24, Cols: 80}
	q := r.URL.Query()
	for field, v := range map[string]*int{"rows": &size.Rows, "cols": &size.Cols} {
		if q.Has(field) {
			n, err := strconv.Atoi(q.Get(field))
			if err != nil {
				s.writeHTTPError(w, r, cocoonbox.Invalid(field, fmt.Sprintf("must be a number, got %q", q.Get(field))))
				return
			}
			*v = n
		}
	}
	caller, tokenID, ticket, err := s.edgeCaller(r, id, modeTerminal)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	if err := s.boxes.CheckShell(ctx, caller, id); err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	if ticket != nil {
		if err := s.spendTicket(ctx, *ticket); err != nil {
			s.writeHTTPError(w, r, err)
			return
		}
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return // Accept answered the client
	}
	defer func() { _ = ws.CloseNow() }()
	ws.SetReadLimit(terminalReadLimit)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() { // a revoked token or share ends the session, as it ends a desktop
		t := time.NewTicker(desktopRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := s.checkToken(ctx, tokenID)
				if err == nil {
					err = s.boxes.CheckShell(ctx, caller, id)
				}
				// A check that could not be made now (the database busy) is not a refusal.
				if err != nil && refusesAccess(err) && ctx.Err() == nil {
					cancel(err)
					return
				}
			}
		}
	}()
	s.log.InfoContext(ctx, "terminal opened", "box", id, "user", caller)
	recv := func() (boxsvc.ShellInput, error) {
		for {
			typ, b, err := ws.Read(ctx)
			if err != nil {
				return boxsvc.ShellInput{}, err
			}
			if typ == websocket.MessageBinary {
				return boxsvc.ShellInput{Stdin: b}, nil
			}
			var c terminalControl
			if err := json.Unmarshal(b, &c); err != nil || c.Resize == nil {
				return boxsvc.ShellInput{}, cocoonbox.Invalid("message", `a text message must be {"resize":{"rows":R,"cols":C}}`)
			}
			return boxsvc.ShellInput{Resize: &boxsvc.WindowSize{Rows: c.Resize.Rows, Cols: c.Resize.Cols}}, nil
		}
	}
	exit := -1
	err = s.boxes.Shell(ctx, caller, id, boxsvc.ShellStart{TTY: &size}, recv, func(out boxsvc.ShellOutput) error {
		if out.Exited {
			exit = out.ExitCode
			return nil
		}
		if len(out.Stdout) == 0 {
			return nil
		}
		return ws.Write(ctx, websocket.MessageBinary, out.Stdout)
	})
	code, reason := websocket.StatusNormalClosure, ""
	switch cause := context.Cause(ctx); {
	case err == nil:
		msg, _ := json.Marshal(map[string]int{"exit": exit})
		_ = ws.Write(ctx, websocket.MessageText, msg)
	case cause != nil && !errors.Is(cause, context.Canceled):
		code, reason = websocket.StatusPolicyViolation, cocoonbox.ErrorMessage(cause)
	case websocket.CloseStatus(err) != -1:
		// the client closed
	default:
		code, reason = websocket.StatusInternalError, err.Error()
		var ce *cocoonbox.Error
		if errors.As(err, &ce) && ce.Code == cocoonbox.EInvalid {
			code = websocket.StatusPolicyViolation
		}
	}
	_ = ws.Close(code, closeReason(reason))
	s.log.InfoContext(ctx, "terminal closed", "box", id, "user", caller, "exit", exit, "status", code)
}
