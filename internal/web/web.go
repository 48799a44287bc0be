// Package web is the browser app the API serves at /: sign in with a token, list boxes, open one
// to watch or drive its desktop (noVNC, vendored from npm as plain ES modules) and wake,
// hibernate, snapshot, take over or hand back; beside the desktop, give the box's agent a task and
// follow its runs step by step (agent.js); drop files onto the desktop to upload them, download
// one by path, and open a terminal in the box (terminal.html, xterm.js vendored from npm). It installs as an app of its own (manifest, icons, and
// a service worker that keeps only its own files for offline opening). It is static files embedded in the binary; every
// action is a Connect/JSON call to the same API the CLI uses, so it holds no rules of its own.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the app. Responses forbid framing and limit scripts, styles and connections to
// this origin: connect-src 'self' covers the desktop edge's ws: or wss: on the same host (CSP
// Level 3), and no other host, so a script smuggled in through box data has nowhere to send a
// token or the screen.
func Handler() http.Handler {
	root, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		style := "'self'"
		if r.URL.Path == "/terminal.html" {
			style = "'self' 'unsafe-inline'" // xterm.js styles itself with <style> elements; this page only
		}
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; style-src "+style+"; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasSuffix(r.URL.Path, ".webmanifest") {
			h.Set("Content-Type", "application/manifest+json")
		}
		if r.URL.Path == "/sw.js" {
			h.Set("Cache-Control", "no-cache") // a new worker is seen on the next visit
		}
		files.ServeHTTP(w, r)
	})
}
