// Package api is cocoonbox's thin frontend: it authenticates callers, checks ownership and share
// roles, and serves the public gRPC services, /healthz and (later) MCP, the web app and the
// desktop edge on one loopback port. State changes go through Temporal workflows; this package
// never calls the sandbox engine directly.
package api
