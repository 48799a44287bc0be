package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/coder/websocket"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// The ports edge: GET /v1/boxes/{id}/ports/{port} upgrades to a WebSocket that carries one TCP
// connection to the port on the box's loopback, byte for byte (binary messages), for a caller
// with a full token and viewer or above on the box (`cocoonbox box port` listens locally and
// opens one per connection). The box's agent ports are refused; so is a sleeping box to a
// viewer. Nothing in between reads the bytes: what the port serves is the box's business.

// routePorts is the ports edge's route for token scopes: a stream into the box, so a read token
// may not open one.
const routePorts = "ports"

// portReadLimit bounds one WebSocket message from the client; the CLI sends at most its copy
// buffer (32 KiB) per message.
const portReadLimit = 1 << 20

func (s *Server) servePort(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !headerHas(r.Header, "Upgrade", "websocket") {
		// A browser's look at the port: the preview is the same path with a slash.
		http.Redirect(w, r, r.URL.Path+"/", http.StatusPermanentRedirect)
		return
	}
	if err := checkWebSocket(r); err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	caller, id, port, err := s.portCaller(r)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	box, err := s.boxes.DialPort(ctx, caller, id, port)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	defer func() { _ = box.Close() }()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return // Accept answered the client
	}
	defer func() { _ = ws.CloseNow() }()
	ws.SetReadLimit(portReadLimit)
	s.log.InfoContext(ctx, "port connected", "box", id, "user", caller, "port", port)
	code, reason := relayPort(ctx, ws, box)
	s.log.InfoContext(ctx, "port closed", "box", id, "user", caller, "port", port, "status", code, "reason", reason)
}

// portCaller reads the box and port a ports-edge or preview request names and the user its
// bearer token acts for, refusing a malformed box ID, a port users may not open and a token
// that may not reach the edge.
func (s *Server) portCaller(r *http.Request) (caller string, id cocoonbox.BoxID, port int, err error) {
	if id, port, err = portTarget(r); err != nil {
		return "", "", 0, err
	}
	p, err := s.authorize(r.Context(), httpBearer(r), routePorts)
	if err != nil {
		return "", id, port, err
	}
	if s.boxes == nil {
		return "", "", 0, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes")
	}
	return p.User.ID, id, port, nil
}

// portTarget reads the box and port a ports-edge or preview path names.
func portTarget(r *http.Request) (cocoonbox.BoxID, int, error) {
	id := cocoonbox.BoxID(r.PathValue("id"))
	if err := id.Validate(); err != nil {
		return "", 0, cocoonbox.RenameField(err, "box_id", "id")
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		return "", 0, cocoonbox.Invalid("port", "must be a number from 1 to 65535, got "+strconv.Quote(r.PathValue("port")))
	}
	return id, port, boxsvc.CheckPort(port)
}

// relayPort copies bytes both ways until either side ends; the client's half-close reaches the
// box as a CloseWrite, so a request-then-read protocol works.
func relayPort(ctx context.Context, ws *websocket.Conn, box boxsvc.Conn) (websocket.StatusCode, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	up := make(chan error, 1)
	go func() {
		_, err := io.Copy(box, nc)
		if err == nil {
			err = box.CloseWrite() // the client is done sending
		}
		up <- err
	}()
	_, err := io.Copy(nc, box)
	if err == nil {
		select {
		case <-up: // both directions are done
		case <-ctx.Done():
		}
		_ = ws.Close(websocket.StatusNormalClosure, "")
		return websocket.StatusNormalClosure, ""
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code, ce.Reason
	}
	_ = ws.Close(websocket.StatusGoingAway, "the box's port closed")
	return websocket.StatusGoingAway, "the box's port closed"
}

// portPaths are where port is opened through the API for box id: the preview, and the tunnel.
func portPaths(id cocoonbox.BoxID, port int) (preview, tunnel string) {
	tunnel = "/v1/boxes/" + string(id) + "/ports/" + strconv.Itoa(port)
	return tunnel + "/", tunnel
}

// ListPorts lists the ports something in the box listens on.
func (b *boxService) ListPorts(ctx context.Context, req *cbv1.ListPortsRequest) (*cbv1.ListPortsResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	ports, err := svc.ListPorts(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	public, err := svc.PublicPorts(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	out := &cbv1.ListPortsResponse{}
	for _, p := range ports {
		out.Ports = append(out.Ports, b.s.portProto(id, p, slices.Contains(public, p)))
	}
	return out, nil
}

// portProto describes port of box id as the API serves it.
func (s *Server) portProto(id cocoonbox.BoxID, port int, public bool) *cbv1.Port {
	preview, tunnel := portPaths(id, port)
	out := &cbv1.Port{Port: int32(port), PreviewPath: preview, TunnelPath: tunnel, Public: public}
	if s.previewDomain != "" {
		out.PreviewHost = previewHostName(id, port, s.previewDomain)
	}
	return out
}

// SetPortPublic makes a port of the box public or private (owner).
func (b *boxService) SetPortPublic(ctx context.Context, req *cbv1.SetPortPublicRequest) (*cbv1.Port, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	if err := svc.SetPortPublic(ctx, caller, id, int(req.GetPort()), req.GetPublic()); err != nil {
		return nil, err
	}
	return b.s.portProto(id, int(req.GetPort()), req.GetPublic()), nil
}

// SetBoxNetwork replaces the box's egress policy.
func (b *boxService) SetBoxNetwork(ctx context.Context, req *cbv1.SetBoxNetworkRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.SetNetwork(ctx, caller, id, cocoonbox.Network{Policy: req.GetNetwork(), Allow: req.GetNetworkAllow()})
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}
