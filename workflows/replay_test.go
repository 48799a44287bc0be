package workflows_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/loomhand/cocoonbox/workflows"
)

// TestWorkflowReplay replays committed histories of real box, snapshot and agent run workflows
// (recorded on the dev stack by internal/devstack's TestWrite*History and, for agent runs,
// TestAgentRuns; a name ending -vN is a history an older version recorded, kept so the workflows
// running on it still replay) against the current workflows, so a change
// that would break running workflows (reordered or removed activities, timers or search attribute
// upserts without a version marker) fails here rather than in production.
func TestWorkflowReplay(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no histories under testdata/histories")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.BoxWorkflow)
			r.RegisterWorkflow(workflows.SnapshotWorkflow)
			r.RegisterWorkflow(workflows.AgentRunWorkflow)
			logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
			if err := r.ReplayWorkflowHistoryFromJSONFile(logger, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
