// Package worker assembles the Temporal worker that runs cocoonbox's workflows and activities on
// the task queue "cocoonbox", wiring the activities to the store, the sandbox engine and the
// keyring. `cocoonbox dev` and `cocoonbox serve worker` both build their worker here, so the two
// never drift apart.
package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/buildinfo"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	"github.com/loomhand/cocoonbox/workflows"
)

// Options are the worker's dependencies.
type Options struct {
	Temporal client.Client
	Store    *store.Store
	Sandbox  sandbox.Client
	Keys     *secrets.Keyring
	Template string // the image boxes are claimed from; "base" until the desktop image lands
	Blobs    objstore.Store
	// UploadRate caps snapshot uploads in bytes per second; 0 is no cap.
	UploadRate int64
	// Gateway returns the model gateway of agent runs, read at each step (see StaticGateway);
	// nil refuses every step.
	Gateway func() activities.Gateway
	// Vault opens the model keys of agent runs; nil is the store's vault under Keys.
	Vault activities.SecretOpener
	// WebhooksAllowPrivate lets webhook deliveries reach loopback and private addresses (tests,
	// a receiver on the deployment's own network); off, they are refused.
	WebhooksAllowPrivate bool
	Logger               *slog.Logger
	// Interceptors wrap every workflow and activity the worker runs (tracing, or a test's
	// fault points).
	Interceptors []interceptor.WorkerInterceptor
	// NodeDeadAfter is how long a node's heartbeat may be silent and the node still be placed
	// on; 0 is nodes.DefaultDeadAfter.
	NodeDeadAfter time.Duration
	// Node is the ID of the registered node whose engine Sandbox is, empty when none is: boxes
	// claimed or restored there are recorded as on it (activities.Sandbox.Node).
	Node string
}

// GatewayOf is the activities' view of an agent configuration.
func GatewayOf(a config.Agent) activities.Gateway {
	return activities.Gateway{Provider: a.Provider, BaseURL: a.BaseURL, KeySecret: a.KeySecret, Models: a.Models,
		FallbackModels: a.FallbackModels}
}

// StaticGateway is a Gateway option for a configuration that never changes.
func StaticGateway(a config.Agent) func() activities.Gateway {
	g := GatewayOf(a)
	return func() activities.Gateway { return g }
}

// Worker polls the shared task queue and, on an engine node (Options.Node), the node's own
// (workflows.NodeTaskQueue), where the node's snapshots are exported, the restores placed on it
// imported, and its boxes' wakes, hibernates and ready probes tried again, beside its engine.
type Worker struct {
	shared, node worker.Worker
}

// Start starts polling; on failure nothing polls.
func (w *Worker) Start() error {
	if err := w.shared.Start(); err != nil {
		return err
	}
	if w.node != nil {
		if err := w.node.Start(); err != nil {
			w.shared.Stop()
			return err
		}
	}
	return nil
}

// Stop stops polling and waits for the activities under way.
func (w *Worker) Stop() {
	if w.node != nil {
		w.node.Stop()
	}
	w.shared.Stop()
}

// New returns a worker with every workflow and activity registered; the caller starts and stops it.
func New(opts Options) *Worker {
	w := worker.New(opts.Temporal, workflows.TaskQueue, workerOptions(opts))
	w.RegisterWorkflow(workflows.BoxWorkflow)
	w.RegisterWorkflow(workflows.SnapshotWorkflow)
	w.RegisterWorkflow(workflows.AgentRunWorkflow)
	w.RegisterWorkflow(workflows.AttemptsWorkflow)
	w.RegisterWorkflow(workflows.WebhookWorkflow)
	w.RegisterWorkflow(workflows.DrainWorkflow)
	w.RegisterActivity(&activities.Webhooks{Store: opts.Store, Open: opts.Keys.Open, Client: activities.WebhookClient(opts.WebhooksAllowPrivate)})
	tok := store.SandboxTokens{Store: opts.Store, Keys: opts.Keys}
	rows := &activities.Store{Boxes: boxes{opts.Store}}
	w.RegisterActivity(rows)
	creds := boxlink.Credentials(opts.Keys)
	link := &boxlink.Link{Sandbox: opts.Sandbox, Tokens: tok, Credentials: creds}
	snapActs := &activities.Snapshots{
		Client: opts.Sandbox, Tokens: tok, Blobs: opts.Blobs, Store: snapshots{opts.Store},
		Template: opts.Template, UploadRate: opts.UploadRate, Credentials: creds, Link: link, Node: opts.Node,
		NodeDeadAfter: opts.NodeDeadAfter,
	}
	// The credential is written at claim (WaitReady) and checked again before each agent step.
	sbActs := &activities.Sandbox{Client: opts.Sandbox, Tokens: tok, Template: opts.Template, Credentials: creds,
		NodeDeadAfter: opts.NodeDeadAfter, Rows: rows, Node: opts.Node}
	if opts.Store != nil {
		// With engine nodes registered, claims and restores are placed on them.
		sbActs.Nodes, snapActs.Nodes = opts.Store.ListNodes, opts.Store.ListNodes
		sbActs.Placed, snapActs.Placed = opts.Store.NotePlaced, opts.Store.NotePlaced
	}
	w.RegisterActivity(snapActs)
	out := &Worker{shared: w}
	if opts.Node != "" {
		out.node = worker.New(opts.Temporal, workflows.NodeTaskQueue(opts.Node), workerOptions(opts))
		out.node.RegisterActivity(snapActs)
		out.node.RegisterActivity(sbActs)
	}
	w.RegisterActivity(sbActs)
	w.RegisterActivity(drainActivities(opts.Temporal, opts.Store, tok, opts.Template, opts.NodeDeadAfter))
	var vlt activities.SecretOpener = &vault.Vault{Store: opts.Store, Keys: opts.Keys}
	if opts.Vault != nil {
		vlt = opts.Vault
	}
	w.RegisterActivity(&activities.Agent{
		Link: link,
		Runs: opts.Store, Vault: vlt, Gateway: opts.Gateway, Wake: wakeBox(opts.Temporal, opts.Store), Usage: usageLedger(opts.Store), Texts: runTexts(opts.Store),
		Attempts: opts.Store,
	})
	w.RegisterActivity(&activities.Attempts{Store: opts.Store, Adopt: adoptBox(opts.Temporal), DeleteBox: deleteBox(opts.Temporal)})
	wake := wakeBox(opts.Temporal, opts.Store)
	w.RegisterActivity(&activities.Recorder{Client: opts.Sandbox, Tokens: tok, Blobs: opts.Blobs, Store: opts.Store,
		Wake: func(ctx context.Context, id cocoonbox.BoxID) error { _, err := wake(ctx, id); return err }})
	return out
}

// adoptBox gives box the state of box from: a checkpoint with memory of from (its fork update),
// then box's adopt update. Both updates carry IDs made from key, so a retried activity gets the
// answers of the updates its first try sent.
func adoptBox(c client.Client) func(ctx context.Context, box, from cocoonbox.BoxID, key string) error {
	return func(ctx context.Context, box, from cocoonbox.BoxID, key string) error {
		res, err := workflows.Update[workflows.ForkResult](workflows.WithUpdateID(ctx, key+"/fork"), c, from, workflows.UpdateFork,
			workflows.ForkInput{ForkID: key, Count: 1, By: "its best-of-N run"})
		if err != nil {
			return err
		}
		_, err = workflows.Update[workflows.Status](workflows.WithUpdateID(ctx, key+"/adopt"), c, box, workflows.UpdateAdopt,
			workflows.AdoptInput{From: from, CheckpointID: res.CheckpointID, Node: res.Node})
		return err
	}
}

// deleteBox deletes a box and its snapshots through its workflow; one already deleted, or whose
// workflow is gone, is done.
func deleteBox(c client.Client) func(ctx context.Context, box cocoonbox.BoxID) error {
	return func(ctx context.Context, box cocoonbox.BoxID) error {
		_, err := workflows.Update[workflows.Status](ctx, c, box, workflows.UpdateDelete, workflows.DeleteInput{PurgeSnapshots: true})
		if err != nil && (workflows.Missing(err) || cocoonbox.ErrorCode(err) == cocoonbox.ENotFound) {
			return nil
		}
		return err
	}
}

// wakeBox wakes a box through its workflow (a no-op when it runs), for the agent step activity:
// an update cannot be sent from a workflow. A box without a workflow, or one whose state refuses
// a wake (deleted), is a permanent failure of the step.
func wakeBox(c client.Client, st *store.Store) func(context.Context, cocoonbox.BoxID) (activities.BoxLease, error) {
	return func(ctx context.Context, id cocoonbox.BoxID) (activities.BoxLease, error) {
		if s, err := workflows.GetStatus(ctx, c, id); err == nil && workflows.Up(s.State) {
			return lease(s), nil
		}
		// A sleeping box is woken for a step only within its owner's box-hours budget (a budget
		// that cannot be read lets the wake through, as the API's does).
		if st != nil {
			if h, err := st.BoxHoursOfBox(ctx, id); err == nil {
				if err := h.Refusal(); err != nil {
					return activities.BoxLease{}, err
				}
			}
		}
		s, err := workflows.Wake(ctx, c, id, "for an agent run's step")
		return lease(s), err
	}
}

func lease(st workflows.Status) activities.BoxLease {
	return activities.BoxLease{Controller: st.Controller, Seq: st.LeaseSeq}
}

// boxes is the store as activities.BoxStore: its methods, with the box's create and audit line
// in the activities' shapes. Store errors are domain errors already.
type boxes struct{ *store.Store }

func (b boxes) CreateBox(ctx context.Context, box cocoonbox.Box) error {
	_, err := b.Store.CreateBox(ctx, store.NewBox{ID: box.ID, Owner: box.Owner, Name: box.Name, Size: box.Size})
	return err
}

func (b boxes) AppendEvent(ctx context.Context, id cocoonbox.BoxID, kind, detail string) error {
	e, err := boxEvent(id, kind, detail)
	if err != nil {
		return err
	}
	return b.Store.AppendEvent(ctx, e)
}

func (b boxes) SetBoxStateWithEvent(ctx context.Context, id cocoonbox.BoxID, state cocoonbox.BoxState, sandboxID, reason, kind, detail string) error {
	e, err := boxEvent(id, kind, detail)
	if err != nil {
		return err
	}
	return b.Store.InTx(ctx, func(q *store.Queries) error {
		if err := q.SetBoxState(ctx, id, state, sandboxID, reason); err != nil {
			return err
		}
		return q.AppendEvent(ctx, e)
	})
}

// boxEvent is the workflow's event kind of box id as a line of the audit trail, by the worker.
func boxEvent(id cocoonbox.BoxID, kind, detail string) (store.Event, error) {
	d, err := json.Marshal(map[string]string{"detail": detail})
	if err != nil {
		return store.Event{}, err
	}
	// The workflow names some kinds with hyphens (sandbox-replaced); an action is dotted words of
	// lowercase letters, digits and underscores, and the table refuses anything else.
	action := "box." + strings.ReplaceAll(kind, "-", "_")
	return store.Event{Actor: "worker", BoxID: string(id), Action: action, Detail: d}, nil
}

// snapshots is the store as activities.SnapshotStore, with BeginSnapshot in the activities' shape.
type snapshots struct{ *store.Store }

func (s snapshots) BeginSnapshot(ctx context.Context, sn cocoonbox.Snapshot) (cocoonbox.Snapshot, error) {
	return s.Store.BeginSnapshot(ctx, store.NewSnapshot{ID: sn.ID, BoxID: sn.BoxID, ParentID: sn.ParentID,
		BaseID: sn.BaseID, ObjectKey: sn.ObjectKey, IndexKey: sn.IndexKey})
}

// runTexts is the store as the publisher of runs' streamed text, or nil without a store.
func runTexts(s *store.Store) activities.RunTexts {
	if s == nil {
		return nil
	}
	return s
}

// usageLedger is the store as the agent's ledger, or nil (nothing metered) without a store.
func usageLedger(s *store.Store) activities.UsageLedger {
	if s == nil {
		return nil
	}
	return s
}

// workerOptions are the SDK options of every worker of the process. The build ID names the
// binary in each workflow task's history event. Without the process's binary checksum set as
// well, the SDK reads the whole executable to hash one as a worker starts, build ID or not
// (about half a second of CPU for a 200 MB cocoonbox); both are that name. Worker versioning
// stays off, so it is only a name.
func workerOptions(opts Options) worker.Options {
	worker.SetBinaryChecksum(BuildName())
	return worker.Options{Interceptors: opts.Interceptors, BuildID: BuildName()}
}

// BuildName names this build to Temporal: in workflow task events, and as the checksum the SDK
// would otherwise hash the executable for.
func BuildName() string { return "cocoonbox@" + buildinfo.String() }
