package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
)

// The preview: /v1/boxes/{id}/ports/{port}/{path...} is an HTTP reverse proxy to the web server
// on that port of the box's loopback, WebSocket upgrades included, for a caller with a full
// token and viewer or above (as the ports edge). The request reaches the box without the
// caller's credential, and every answer is served under a sandbox Content-Security-Policy: the
// box's pages come from this API's origin, so without it a page's script could read what the web
// app keeps for that origin, the user's token among it.

// previewCSP makes every preview document an opaque origin: scripts, forms and popups work, but
// the page shares no storage, cookies or DOM with the API's origin.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals"

// previewHeaderTimeout bounds how long the box's server may take to start answering.
const previewHeaderTimeout = time.Minute

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	caller, id, port, err := s.portCaller(r)
	dial := func(ctx context.Context) (net.Conn, error) { return s.boxes.DialPort(ctx, caller, id, port) }
	if cocoonbox.ErrorCode(err) == cocoonbox.EUnauthorized && httpBearer(r) == "" && s.boxes != nil {
		// No credential (portCaller read the box and port first): a public port still answers,
		// sandboxed as ever.
		err = nil
		dial = func(ctx context.Context) (net.Conn, error) { return s.boxes.DialPublicPort(ctx, id, port) }
	}
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	s.previewProxy(w, r, port, "/"+r.PathValue("path"), true, dial)
}

// previewProxy proxies r to port of the box over connections dial opens, at path. The caller's
// credential (its Authorization header and the preview's session cookie) never reaches the box,
// nor may the box set that cookie. sandboxed serves every answer under previewCSP, for a preview
// on the API's own origin; a preview on its own host is the box's origin and keeps the box's
// cookies.
func (s *Server) previewProxy(w http.ResponseWriter, r *http.Request, port int, path string, sandboxed bool, dial func(context.Context) (net.Conn, error)) {
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var dialErr error // the box service's refusal, which the client sees as the API's JSON error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", host
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = host
			pr.Out.Header.Del("Authorization") // the caller's token is not the box's to see
			if sandboxed {
				pr.Out.Header.Del("Cookie")
			} else {
				withoutCookie(pr.Out, previewCookie)
			}
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			// Every connection is one the box service checked (role, wake) and dialled.
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := dial(ctx)
				if err != nil {
					dialErr = err
				}
				return c, err
			},
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: previewHeaderTimeout,
		},
		ModifyResponse: func(resp *http.Response) error {
			if sandboxed {
				resp.Header.Set("Content-Security-Policy", previewCSP)
				resp.Header.Del("Set-Cookie")
				return nil
			}
			var kept []string
			for _, c := range resp.Header.Values("Set-Cookie") {
				if sc, err := http.ParseSetCookie(c); err == nil && !strings.EqualFold(sc.Name, previewCookie) {
					kept = append(kept, c)
				}
			}
			resp.Header.Del("Set-Cookie")
			for _, c := range kept {
				resp.Header.Add("Set-Cookie", c)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if dialErr != nil {
				err = dialErr
			} else if !errors.Is(err, context.Canceled) {
				err = cocoonbox.Errorf(cocoonbox.EUnavailable, "the box's port %d did not answer: %v", port, err)
			}
			s.writeHTTPError(w, r, err)
		},
	}
	rp.ServeHTTP(w, r)
}

// withoutCookie removes the cookie named name from r's Cookie headers, keeping the others.
func withoutCookie(r *http.Request, name string) {
	cookies := r.Cookies()
	r.Header.Del("Cookie")
	for _, c := range cookies {
		if c.Name != name {
			r.AddCookie(c)
		}
	}
}
