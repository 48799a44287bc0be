// Package app assembles the control plane's API role from its parts, once: `cocoonbox serve
// api` and `cocoonbox dev` both build the box service and the API server here, so the two
// cannot drift apart (a knob one of them forgets, a health check only one reports). The
// worker role is assembled by worker.New, which both use already.
package app

import (
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/buildinfo"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
	"github.com/loomhand/cocoonbox/internal/vault"
)

// Parts are what the API role is built on: connections its caller opened and closes.
type Parts struct {
	Temporal client.Client
	Store    *store.Store
	// Keys is the deployment's shared keyring: sandbox tokens, agent credentials, the vault
	// and desktop tickets are all derived from it, the same on every replica and worker.
	Keys    *secrets.Keyring
	Sandbox sandbox.Client
	Logger  *slog.Logger
}

// Boxes builds the box service every API call goes through; network is the egress policy of a
// box whose create names none (config box_network), defaults the config's box_policy over the
// built-in one.
func Boxes(p Parts, agent config.Agent, quota config.Quota, network string, defaults config.BoxPolicy) *boxsvc.Service {
	policy := boxsvc.DefaultPolicy
	policy.Network = cocoonbox.Network{Policy: network}
	if defaults.Idle != nil {
		policy.IdleAfter = *defaults.Idle
	}
	if defaults.Durable != nil {
		policy.DurableHibernate = *defaults.Durable
	}
	if defaults.SnapshotEvery != nil {
		policy.SnapshotEvery = *defaults.SnapshotEvery
	}
	if defaults.Keep > 0 {
		policy.KeepSnapshots = defaults.Keep
	}
	if defaults.LeaseIdle > 0 {
		policy.LeaseIdle = defaults.LeaseIdle
	}
	policy.RecordRuns = defaults.RecordRuns
	return &boxsvc.Service{
		Temporal: p.Temporal, Store: p.Store, Policy: policy,
		Link: &boxlink.Link{
			Sandbox: p.Sandbox,
			Tokens:  store.SandboxTokens{Store: p.Store, Keys: p.Keys},
			// The same derivation as the workers', from the shared keyring.
			Credentials: boxlink.Credentials(p.Keys),
		},
		Logger: p.Logger.With("component", "boxsvc"),
		Agent:  agent,
		Quota:  quota,
	}
}

// APIOptions are what differs between the API's hosts.
type APIOptions struct {
	// MaxDesktopConns caps one box's desktop connections; 0 is api.DefaultMaxDesktopConns.
	MaxDesktopConns int
	// Checks are /healthz components beyond the two every API has (temporal, postgres).
	Checks map[string]api.Check
	// PreviewDomain serves box ports' previews on hosts of their own (api.Options).
	PreviewDomain string
	// Starting holds requests back while the API waits for a dependency (api.Options).
	Starting func() error
}

// API builds the API server over boxes, reporting Temporal and PostgreSQL in /healthz beside
// opts.Checks.
func API(p Parts, boxes *boxsvc.Service, opts APIOptions) *api.Server {
	checks := map[string]api.Check{
		"temporal": tclient.Ping(p.Temporal),
		"postgres": p.Store.Ping,
	}
	for name, c := range opts.Checks {
		checks[name] = c
	}
	return api.New(api.Options{
		Store: p.Store, Boxes: boxes, Vault: &vault.Vault{Store: p.Store, Keys: p.Keys}, Keys: p.Keys,
		Version: buildinfo.String(), Logger: p.Logger.With("component", "api"),
		MaxDesktopConns: opts.MaxDesktopConns, Checks: checks, PreviewDomain: opts.PreviewDomain,
		Starting: opts.Starting,
	})
}
