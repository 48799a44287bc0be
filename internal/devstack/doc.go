// Package devstack is `cocoonbox dev`: it starts everything one machine needs — an embedded
// Temporal dev server (SQLite file, Web UI), a managed PostgreSQL cluster, an embedded S3 server
// and the API — on loopback, keeping all state under one data dir so a restart loses nothing.
// Each embedded part is skipped when its external counterpart is configured.
//
// It is imported only by cmd/cocoonbox and the integration tests, so the Temporal server (a large
// dependency that takes minutes to build cold) stays out of other builds: the API, worker and
// engine roles talk to Temporal through the SDK only.
package devstack
