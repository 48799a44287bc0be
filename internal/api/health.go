package api

import (
	"net/http"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/health"
)

// Check reports whether one component the API depends on is healthy.
type Check = health.Check

// HealthReport is the body of GET /healthz. Without an operator's token only Status is set.
type HealthReport = health.Report

// serveHealth answers the cached status; an operator's token adds the version and each
// component's result. Any other token, valid or not, gets the bare status, as a load balancer
// does.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	rep := s.health.Report(r.Context())
	if tok := httpBearer(r); tok == "" || s.operator(r, tok) != nil {
		rep = HealthReport{Status: rep.Status}
	}
	health.WriteJSON(w, rep)
}

// operator authorizes an operator's request: a token of an admin user.
func (s *Server) operator(r *http.Request, token string) error {
	p, err := s.authorize(r.Context(), token, routeOperator)
	if err != nil {
		return err
	}
	if !p.User.Admin {
		return cocoonbox.Errorf(cocoonbox.EForbidden, "%s is for operators: use an admin user's token", r.URL.Path)
	}
	return nil
}

// operatorOnly serves next to operators only.
func (s *Server) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.operator(r, httpBearer(r)); err != nil {
			s.writeHTTPError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
