package devstack_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// forkBenchRounds is how many forks of each count BenchmarkFork times: each of N = 8 restores
// eight desktops on two cores.
const forkBenchRounds = 3

// BenchmarkFork: boxsvc Fork of a running desktop box into N = 1, 3 and 8 boxes until every
// fork answers an exec through the API (FirstExecN), how long the source was paused for each
// (SourcePaused, as the fork update measured its engine call), in turn with the engine's part
// done raw with the sandbox client: a checkpoint with memory (RawCheckpoint, the raw pause) and
// one claim from it to its first exec (RawCheckpointClaim).
func BenchmarkFork(b *testing.B) {
	e := newDesktopBench(b)
	src, err := e.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	var paused, rawPaused, raw []time.Duration
	byCount := map[int][]time.Duration{}
	for round := range forkBenchRounds {
		for _, n := range []int{1, 3, 8} {
			start := time.Now()
			forked, err := e.d.Boxes.Fork(e.ctx, e.owner.ID, e.id, boxsvc.ForkRequest{Count: n, Name: fmt.Sprintf("bench-%d-%d", round, n)})
			if err != nil {
				b.Fatalf("fork %d: %v", n, err)
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i, f := range forked.Boxes {
				wg.Go(func() {
					res, err := e.d.Boxes.Exec(e.ctx, e.owner.ID, f.BoxID, boxsvc.ExecRequest{Argv: []string{"true"}})
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("exit %d", res.ExitCode)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			byCount[n] = append(byCount[n], time.Since(start))
			paused = append(paused, forked.Paused)
			for i, f := range forked.Boxes {
				if errs[i] != nil {
					b.Fatalf("first exec of fork %s: %v", f.BoxID, errs[i])
				}
				if _, err := e.d.Boxes.DeleteWith(e.ctx, e.owner.ID, f.BoxID, workflows.DeleteInput{PurgeSnapshots: true}); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(boxBenchPause)
		}
		start := time.Now()
		ck, err := e.eng.CheckpointMemory(e.ctx, src, "bench:"+strconv.Itoa(round))
		if err != nil {
			b.Fatal(err)
		}
		rawPaused = append(rawPaused, time.Since(start))
		got, err := e.eng.ClaimFromCheckpoint(e.ctx, ck.ID, 0, "")
		if err == nil {
			var res sandbox.ExecResult
			res, err = e.eng.Exec(e.ctx, got.SandboxRef, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 30})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
		}
		raw = append(raw, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		_ = e.eng.Release(e.ctx, got.SandboxRef)
		_ = e.eng.DeleteCheckpoint(e.ctx, ck.ID)
		time.Sleep(boxBenchPause)
	}
	for _, n := range []int{1, 3, 8} {
		benchreport.Taken(b, "FirstExec"+strconv.Itoa(n), byCount[n])
	}
	benchreport.Taken(b, "SourcePaused", paused)
	benchreport.Taken(b, "RawCheckpoint", rawPaused)
	benchreport.Taken(b, "RawCheckpointClaim", raw)
	if v, err := e.d.Boxes.Get(e.ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateRunning {
		b.Fatalf("the source after %d forks: %s, %v", forkBenchRounds*12, v.State, err)
	}
}
