package devstack

import (
	"crypto/subtle"
	"fmt"
	"html/template"
	"net/http"
	"strings"
)

// UI login: the UI server dials the frontend with the stack's client certificate, so whoever
// reaches the UI port would otherwise get everything that certificate grants. A browser logs in
// once with the token the stack keeps in the data dir and then carries it in a cookie; a script
// sends it as a bearer token.
const (
	uiTokenFile   = "ui-token"
	uiCookie      = "cocoonbox_temporal_ui"
	uiLoginPath   = "/cocoonbox/login"
	uiLoginMaxLen = 4 << 10 // a login form is one short field
)

// uiLogin checks the UI token in front of the UI server.
type uiLogin struct {
	token     string
	tokenPath string // named on the login page, so the person knows where to look
}

// wrap serves next only to a caller holding the token. /healthz stays open: it says only "OK"
// and the start waits on it.
func (l *uiLogin) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			next.ServeHTTP(w, r)
		case r.URL.Path == uiLoginPath && r.Method == http.MethodPost:
			l.login(w, r)
		case l.holds(r):
			next.ServeHTTP(w, r)
		default:
			l.refuse(w, r, "")
		}
	})
}

// holds reports whether r carries the token, in the login cookie or as a bearer token.
func (l *uiLogin) holds(r *http.Request) bool {
	if c, err := r.Cookie(uiCookie); err == nil && l.matches(c.Value) {
		return true
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && l.matches(bearer)
}

func (l *uiLogin) matches(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(l.token)) == 1
}

// login takes the form of the login page and, with the right token, sets the cookie.
func (l *uiLogin) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, uiLoginMaxLen)
	if err := r.ParseForm(); err != nil || !l.matches(strings.TrimSpace(r.PostFormValue("token"))) {
		l.refuse(w, r, "That is not the token.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: uiCookie, Value: l.token, Path: "/",
		// Plain HTTP on loopback, so not Secure; Lax keeps cross-site posts from carrying it.
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// refuse answers 401: the login page to a browser asking for a page, one line to anything else.
func (l *uiLogin) refuse(w http.ResponseWriter, r *http.Request, problem string) {
	w.Header().Set("Cache-Control", "no-store")
	page := r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
	if page || r.URL.Path == uiLoginPath {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginPage.Execute(w, struct{ Problem, TokenPath, Action string }{problem, l.tokenPath, uiLoginPath})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintf(w, "temporal ui: log in first with the token in %s (or send it as a bearer token)\n", l.tokenPath)
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Temporal UI · cocoonbox dev</title></head>
<body style="font-family: sans-serif; max-width: 36em; margin: 4em auto">
<h1>Temporal UI</h1>
<p>This UI belongs to a <code>cocoonbox dev</code> stack. Give the token it keeps in
<code>{{.TokenPath}}</code>.</p>
{{if .Problem}}<p><strong>{{.Problem}}</strong></p>{{end}}
<form method="post" action="{{.Action}}">
<input type="password" name="token" autocomplete="current-password" autofocus size="40">
<button type="submit">Log in</button>
</form>
</body></html>
`))
