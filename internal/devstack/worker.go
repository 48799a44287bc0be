package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/app"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

// LocalNode is the node ID of the dev stack's engine.
const LocalNode = "local"

// startWorker runs the Temporal worker for the box workflows in this process, against the
// engine and the store, and builds the service layer over it. With NoWorker only the service
// layer is built; a worker started elsewhere (`cocoonbox serve worker`, a test's child) runs the
// workflows.
func (d *Dev) startWorker() error {
	// The same key file a `cocoonbox serve worker` on this data dir would use.
	keys, err := secrets.LoadOrCreateKeyring((&config.Worker{Home: d.cfg.Home}).KeyringPath())
	if err != nil {
		return err
	}
	d.keys = keys
	// nil: the sandbox client's own transport, with connect timeouts but no overall limit, which
	// would cut off long engine calls such as a disk export; each call is bounded by its context.
	sb := sandbox.NewHTTP(d.sandboxURL, d.sandboxToken, nil)
	d.parts = app.Parts{Temporal: d.Temporal, Store: d.Store, Keys: keys, Sandbox: sb, Logger: d.log}
	d.Boxes = app.Boxes(d.parts, d.cfg.Agent, d.cfg.Quota, d.cfg.DefaultBoxNetwork(), d.cfg.BoxPolicy)
	d.Boxes.CreateWait = d.cfg.CreateWait
	d.Boxes.Recordings = d.Blobs
	if d.cfg.NoWorker {
		return nil
	}
	w := worker.New(worker.Options{
		Temporal: d.Temporal, Store: d.Store, Sandbox: sb, Keys: keys, Template: d.cfg.Template,
		Blobs: d.Blobs, Gateway: d.gateway, Logger: d.log.With("component", "worker"),
		WebhooksAllowPrivate: d.cfg.Webhooks.AllowPrivate, Node: LocalNode, NodeDeadAfter: d.cfg.NodeDeadAfter,
	})
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	d.worker = w
	hooks := worker.StartDispatcher(&worker.Dispatcher{Temporal: d.Temporal, Store: d.Store,
		RetryFirst: d.cfg.Webhooks.RetryFirst, Logger: d.log.With("component", "webhooks")})
	rec := worker.StartReconciler(&worker.Reconciler{Temporal: d.Temporal, Store: d.Store,
		Logger: d.log.With("component", "reconciler")})
	// The stack's one engine is its node "local", listed by `cocoonbox admin nodes`. Its record
	// has the engine's address of this start before anything reaches a box: a box's sandbox is
	// found at the address its node's record has.
	// As serve worker's, its beats mark a silent node lost and tell that node's boxes.
	tc := d.Temporal
	h := &worker.Heartbeat{Store: d.Store, Engine: sb,
		Node: nodes.Node{ID: LocalNode, URL: d.sandboxURL}, DeadAfter: d.cfg.NodeDeadAfter, Logger: d.log.With("component", "heartbeat"),
		TellLost: func(ctx context.Context, box cocoonbox.BoxID, sandboxID, node string) error {
			return workflows.SandboxLost(ctx, tc, box, sandboxID, node)
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = h.Beat(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("register node %s: %w", LocalNode, err)
	}
	beat := worker.StartHeartbeat(h)
	reseal := worker.StartResealer(&worker.Resealer{Store: d.Store, Keys: keys, Logger: d.log.With("component", "reseal")})
	keep := worker.StartRecordingRetention(&worker.RecordingRetention{Store: d.Store, Blobs: d.Blobs, Keep: d.cfg.Recordings,
		Logger: d.log.With("component", "recordings")})
	d.stopHooks = func() { beat(); rec(); hooks(); reseal(); keep() }
	return nil
}

// gateway is the agent gateway of the stack's worker: its configuration's, or what a test set
// since (SetAgent in export_test.go).
func (d *Dev) gateway() activities.Gateway {
	d.agentMu.Lock()
	defer d.agentMu.Unlock()
	return worker.GatewayOf(d.cfg.Agent)
}
