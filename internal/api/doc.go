// Package api is cocoonbox's thin frontend: it authenticates callers and serves the public gRPC
// services (with Connect/JSON for browsers through vanguard, gRPC health and reflection), MCP at
// /mcp, /healthz and /metrics on one loopback port — and later the web app and the desktop edge.
// Every box call goes through internal/boxsvc, which checks ownership and share roles and makes
// state changes through Temporal workflows; this package never calls the sandbox engine itself.
package api
