// Package sandbox is how cocoonbox reaches a sandbox engine. Activities never speak HTTP to the
// engine themselves: they hold a Client, and the one implementation here (HTTP) speaks the
// upstream sandboxd API (shared/SANDBOXD.md) to either the upstream daemon in production or the
// local engine (internal/engine) in development and CI.
//
// The package exists so that the rules of that API live in one place: its JSON wire types
// (wire.go, also imported by the local engine so both ends agree byte for byte), the table
// from HTTP status to sentinel error, each a domain error (errors.go), and the semantics a caller would otherwise get
// wrong — claims are not idempotent and are adopted by claim_ref before any retry (claim.go),
// redirects are followed with no_redirect, release of a gone sandbox is success, and the ports
// relay is a raw half-closable byte pipe (relay.go).
//
// The behavioural fake in sandboxtest and the suite in conformance check that an engine keeps
// this contract.
package sandbox
