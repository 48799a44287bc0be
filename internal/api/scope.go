package api

import (
	"fmt"
	"strings"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// readRoutes are what a read-scoped token may reach: calls that change nothing. ReadFile is not
// among them: it wakes a hibernated box and counts as activity on it. Every route not listed is
// refused to a read token, so a new method is closed to it until it is added here.
var readRoutes = map[string]bool{
	"/cocoonbox.v1.AccountService/WhoAmI":         true,
	"/cocoonbox.v1.AccountService/ListTokens":     true,
	"/cocoonbox.v1.AccountService/ListWebhooks":   true,
	"/cocoonbox.v1.AccountService/ListDeliveries": true,
	"/cocoonbox.v1.AccountService/ListUsers":      true,
	"/cocoonbox.v1.AccountService/GetUsage":       true,
	"/cocoonbox.v1.BoxService/GetBox":             true,
	"/cocoonbox.v1.BoxService/ListBoxes":          true,
	"/cocoonbox.v1.BoxService/WatchBox":           true,
	"/cocoonbox.v1.BoxService/ListSnapshots":      true,
	"/cocoonbox.v1.BoxService/ListShares":         true,
	"/cocoonbox.v1.BoxService/ListEvents":         true,
	"/cocoonbox.v1.BoxService/ListPools":          true,
	"/cocoonbox.v1.BoxService/ListNodes":          true,
	"/cocoonbox.v1.BoxService/GetPolicyDefaults":  true,
	// DesktopTicket in view mode; a control ticket is routeDesktop+modeControl, checked by it.
	"/cocoonbox.v1.BoxService/DesktopTicket":    true,
	"/cocoonbox.v1.AgentService/GetRun":         true,
	"/cocoonbox.v1.AgentService/ListRuns":       true,
	"/cocoonbox.v1.AgentService/WatchRun":       true,
	"/cocoonbox.v1.AgentService/GetStepImages":  true,
	"/cocoonbox.v1.AgentService/GetAttempts":    true,
	"/cocoonbox.v1.AgentService/ListRecordings": true,
	"/cocoonbox.v1.VaultService/ListSecrets":    true,
	routeDesktop + modeView:                     true,
	routeOperator:                               true,
}

// scopes are the token scopes CreateToken accepts.
var scopes = []string{store.ScopeFull, store.ScopeRead, store.ScopeMCP}

// validScope checks a requested scope; empty is full.
func validScope(s string) (string, error) {
	if s == "" {
		return store.ScopeFull, nil
	}
	for _, ok := range scopes {
		if s == ok {
			return s, nil
		}
	}
	return "", cocoonbox.Invalid("scope", fmt.Sprintf("must be one of %s, got %q", strings.Join(scopes, ", "), s))
}

// allowScope reports whether a token of scope may reach route, with an error naming the scope
// when it may not.
func allowScope(scope, route string) error {
	switch {
	case scope == store.ScopeFull,
		scope == store.ScopeRead && readRoutes[route],
		scope == store.ScopeMCP && route == routeMCP:
		return nil
	case scope == store.ScopeMCP:
		return cocoonbox.Errorf(cocoonbox.EForbidden, "token scope %q allows only the /mcp endpoint, not %s: use a full token", scope, routeName(route))
	case scope == store.ScopeRead:
		return cocoonbox.Errorf(cocoonbox.EForbidden, "token scope %q allows only calls that change nothing, not %s: use a full token", scope, routeName(route))
	}
	return cocoonbox.Errorf(cocoonbox.EForbidden, "token scope %q is unknown to this server: use a full token", scope)
}

// routeName is a route as an error message shows it: "BoxService/CreateBox", "/mcp",
// "the desktop in control mode".
func routeName(route string) string {
	if route == routePorts {
		return "the ports edge"
	}
	if route == routeDesktop+modeTerminal {
		return "the terminal"
	}
	if mode, ok := strings.CutPrefix(route, routeDesktop); ok {
		return "the desktop in " + mode + " mode"
	}
	if m, ok := strings.CutPrefix(route, "/cocoonbox.v1."); ok {
		return m
	}
	return route
}
