package devstack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/workflows"
)

// startsBatch is how many workflows a starts benchmark starts at once.
const startsBatch = 40

// BenchmarkBoxWorkflowStarts: how many box workflows a second the embedded Temporal and the dev
// stack's worker start, each until it has run its first workflow task (its status query
// answers, which waits for that task): the Temporal share of a burst of creates, without the
// engine's claims (the workflows wait for their create and are terminated, untimed).
func BenchmarkBoxWorkflowStarts(b *testing.B) {
	d := benchDev(b)
	owner, err := d.Store.UserByName(context.Background(), "admin")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), boxBenchRun)
	defer cancel()
	var samples []time.Duration
	for b.Loop() {
		ids := make([]cocoonbox.BoxID, startsBatch)
		took := slices.Max(atOnce(b, startsBatch, func(i int) error {
			ids[i] = cocoonbox.NewBoxID()
			in := workflows.BoxWorkflowInput{BoxID: ids[i], Owner: owner.ID, Name: fmt.Sprintf("starts-%d", i), Size: cocoonbox.SizeSmall}
			if _, err := d.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: workflows.BoxWorkflowID(ids[i]), TaskQueue: workflows.TaskQueue,
			}, workflows.BoxWorkflow, in); err != nil {
				return err
			}
			_, err := workflows.GetStatus(ctx, d.Temporal, ids[i])
			return err
		}))
		samples = append(samples, took)
		for _, id := range ids {
			if err := d.Temporal.TerminateWorkflow(ctx, workflows.BoxWorkflowID(id), "", "benchmark"); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchreport.Rate(b, startsBatch, "starts/s", samples)
}

// BenchmarkRawWorkflowStarts: the same number of trivial workflows started at once, each until
// it has run (its result is read), on a worker of their own.
func BenchmarkRawWorkflowStarts(b *testing.B) {
	d := benchDev(b)
	noopWorker(b, d, "bench-starts")
	ctx, cancel := context.WithTimeout(context.Background(), boxBenchRun)
	defer cancel()
	var samples []time.Duration
	batch := 0
	for b.Loop() {
		batch++
		samples = append(samples, slices.Max(atOnce(b, startsBatch, func(i int) error {
			run, err := d.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("starts-%d-%d", batch, i), TaskQueue: "bench-starts",
			}, noopWorkflow)
			if err != nil {
				return err
			}
			return run.Get(ctx, nil)
		})))
	}
	benchreport.Rate(b, startsBatch, "starts/s", samples)
}
