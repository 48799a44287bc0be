// The app's service worker: it keeps the app's own files so the app opens, as an installed
// window, even while the server is unreachable (its API calls then fail and say so). It never
// stores an API answer, a desktop stream or a box's preview: only the files listed here, fetched
// again from the network first whenever the network answers.
const CACHE = "cocoonbox-shell-v3";
const SHELL = ["/", "index.html", "app.js", "agent.js", "style.css", "manifest.webmanifest",
  "icon-180.png", "icon-192.png", "icon-512.png",
  "terminal.html", "terminal.js", "xterm/xterm.mjs", "xterm/xterm.css", "xterm/addon-fit.mjs",
  "replay.html", "replay.js"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

// isShell says whether a request is for one of the app's own files (never the API's paths).
function isShell(url) {
  if (url.origin !== self.location.origin) return false;
  const path = url.pathname;
  if (path.startsWith("/v1/") || path.startsWith("/cocoonbox.") || path === "/mcp" || path === "/healthz" || path === "/metrics") {
    return false;
  }
  return path === "/" || SHELL.includes(path.slice(1));
}

self.addEventListener("fetch", (event) => {
  const req = event.request;
  if (req.method !== "GET" || !isShell(new URL(req.url))) return; // the network, untouched
  event.respondWith(fetch(req).then((resp) => {
    if (resp.ok) {
      const copy = resp.clone();
      caches.open(CACHE).then((c) => c.put(req, copy));
    }
    return resp;
  }).catch(() => caches.match(req).then((hit) => hit || Response.error())));
});
