package devstack

import (
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

// defaultPolicy is what a dev box gets: hibernate after 15 idle minutes, an hour's lease renewed
// as it goes.
var defaultPolicy = workflows.Policy{IdleAfter: 15 * time.Minute, LeaseTTL: time.Hour}

// startWorker runs the Temporal worker for the box workflows in this process, against the
// engine and the store, and builds the service layer over it. With NoWorker only the service
// layer is built; a worker started elsewhere (`cocoonbox serve worker`, a test's child) runs the
// workflows.
func (d *Dev) startWorker() error {
	d.Boxes = &boxsvc.Service{Temporal: d.Temporal, Store: d.Store, Policy: defaultPolicy}
	if d.cfg.NoWorker {
		return nil
	}
	keys, err := secrets.LoadOrCreateKeyring(filepath.Join(d.cfg.Home, "keys", "master.key"))
	if err != nil {
		return err
	}
	sb := sandbox.NewHTTP(d.sandboxURL, d.sandboxToken, &http.Client{Timeout: 5 * time.Minute})
	w := worker.New(worker.Options{
		Temporal: d.Temporal, Store: d.Store, Sandbox: sb, Keys: keys, Template: "base",
		Logger: d.log.With("component", "worker"),
	})
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	d.worker = w
	return nil
}
