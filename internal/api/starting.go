package api

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/health"
)

// While the API waits for a dependency at start (Options.Starting), it listens already, so a
// load balancer's probe and a caller both learn why it does not serve yet instead of finding
// the port closed.

// servesWhileStarting reports the requests answered before the API serves: health, which says
// "starting", and reflection, which needs no dependency.
func servesWhileStarting(r *http.Request) bool {
	return r.URL.Path == "/healthz" || isPublic(r.URL.Path)
}

// refuseStarting answers a request that came before the API serves as unavailable, in the
// request's own protocol (an RPC's, else the HTTP routes' JSON error), naming the dependency but not its error: the caller is not
// authenticated yet, and the error may name internal addresses (the log and an operator's
// /healthz have it).
func refuseStarting(w http.ResponseWriter, r *http.Request, err error) {
	dep := "its dependencies"
	if we, ok := errors.AsType[*health.WaitError](err); ok {
		dep = we.Dep
	}
	msg := "the API is starting: waiting for " + dep + "; try again shortly"
	if errw := connect.NewErrorWriter(); isRPCPath(r.URL.Path) && errw.IsSupported(r) {
		_ = errw.Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New(msg)))
		return
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, cocoonbox.EUnavailable, msg)
}
