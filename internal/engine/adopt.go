package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

// checkRuntime refuses to adopt a directory's boxes under another runtime than the one that
// started them. A gVisor box read by the process runtime looks stopped: its next wake would
// start a second box on the same disk while runsc still runs the first, and its memory would
// be lost without a word. Which runtime "auto" picks can change between two starts (runsc
// found or not), so this is checked, not assumed. A directory without records may switch.
func (e *Engine) checkRuntime() error {
	path := filepath.Join(e.dir, runtimeFile)
	name := e.rt.Name()
	var was struct {
		Runtime string `json:"runtime"`
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read runtime marker: %w", err)
	default:
		if err := json.Unmarshal(data, &was); err != nil {
			return fmt.Errorf("read runtime marker %s: %w", path, err)
		}
	}
	if was.Runtime != "" && was.Runtime != name {
		ents, err := os.ReadDir(filepath.Join(e.dir, recordsDir))
		if err != nil {
			return fmt.Errorf("read records: %w", err)
		}
		for _, ent := range ents {
			if strings.HasSuffix(ent.Name(), ".json") {
				return fmt.Errorf("the boxes in %s run under the %s runtime, not %s: start the engine with --runtime %s, or release them first",
					e.dir, was.Runtime, name, was.Runtime)
			}
		}
	}
	if was.Runtime == name {
		return nil
	}
	return writeJSONFile(path, map[string]string{"runtime": name})
}

// adopt rebuilds the engine's view from its records after a restart, asking the runtime what
// it still holds of each box. The runtime is the truth about what runs; the records are the
// truth about who owns it and until when:
//
//   - running: kept running (a hibernated flag left by a crash mid-wake is cleared);
//   - hibernated: kept hibernated and wakes on the next use (a crash mid-hibernate is fixed up);
//   - stopped (disk kept, processes gone, e.g. after a host reboot): kept as hibernated, and its
//     next wake starts it again on its disk — files survive, memory does not;
//   - missing: the record is dropped with a log line and a "lost" journal entry;
//   - a half-started box (pending) or one whose destroy failed (released) is destroyed.
//
// Warm pool boxes return to their pool if it still wants them and are destroyed otherwise.
// Leases keep their deadlines, except one that ran out while the engine was down, which gets
// adoptGrace more: the engine cannot tell a long downtime from a wall clock that jumped ahead
// (an NTP step, a host resumed from suspend), and a jump must not reap every box at once
// before its owner, whose timers the jump fires too, renews it. An owner that is gone lets the
// grace run out, and the box is reaped then. Box directories without a record are removed.
func (e *Engine) adopt(ctx context.Context) error {
	recs, err := e.loadRecords()
	if err != nil {
		return err
	}
	now := e.now()
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		b := newBox(r, now)
		if r.Pending || r.Released {
			e.log.Warn("destroying a box left half-made or half-released by the previous engine", "id", r.ID)
			b.gone = true
			e.destroy(ctx, b)
			continue
		}
		st, err := e.rt.State(ctx, r.ID, e.boxDir(r.ID))
		if err != nil {
			// Keep it: a runtime that cannot answer now may answer later, and dropping the
			// record would orphan a box and lose its token.
			e.log.Error("cannot read box state; keeping the record as it was", "id", r.ID, "err", err)
			e.boxes[r.ID] = b
			continue
		}
		if st == runtime.StateMissing {
			e.log.Warn("dropping the record of a box the runtime no longer has", "id", r.ID, "warm", r.Warm)
			e.drop(b)
			if !r.Warm {
				e.journal.write("release", r, "lost")
				e.metrics.count("releases", "lost")
			}
			continue
		}
		if r.Warm {
			e.adoptWarm(ctx, b, st)
			continue
		}
		hibernated := st != runtime.StateRunning
		b.stopped = st == runtime.StateStopped
		if b.stopped {
			e.log.Warn("box was stopped while the engine was down; it restarts on its disk at the next wake", "id", r.ID)
		}
		e.boxes[r.ID] = b
		changed := hibernated != r.Hibernated
		b.rec.Hibernated = hibernated
		if !now.Before(r.Deadline) {
			e.log.Warn("the box's lease ran out while the engine was down, or the clock jumped ahead; kept for its owner to renew",
				"id", r.ID, "deadline", r.Deadline, "grace", adoptGrace)
			b.rec.Deadline = now.Add(adoptGrace)
			changed = true
		}
		if changed {
			if err := e.save(b); err != nil {
				e.log.Error("save adopted record", "id", r.ID, "err", err)
			}
		}
		e.log.Info("adopted sandbox", "id", r.ID, "state", st, "deadline", r.Deadline)
	}
	e.removeOrphanDirs(ctx, known)
	return nil
}

// adoptGrace is how long an adopted box whose lease ran out is kept for its owner to renew.
const adoptGrace = 10 * time.Minute

// adoptWarm puts a running warm box back in its pool, or destroys it.
func (e *Engine) adoptWarm(ctx context.Context, b *box, st runtime.State) {
	p := e.pools[b.rec.Key]
	if st == runtime.StateRunning && p != nil && len(p.ready) < p.spec.Warm {
		e.boxes[b.rec.ID] = b
		p.ready = append(p.ready, b)
		return
	}
	b.gone = true
	e.destroy(ctx, b)
}

// removeOrphanDirs removes box directories no record names: left by a crash between a destroy
// and the removal of its record, they would otherwise hold disk forever.
func (e *Engine) removeOrphanDirs(ctx context.Context, known map[string]bool) {
	entries, err := os.ReadDir(filepath.Join(e.dir, boxesDir))
	if err != nil {
		e.log.Error("list box directories", "err", err)
		return
	}
	for _, ent := range entries {
		id := ent.Name()
		if known[id] || !validSandboxID(id) {
			continue
		}
		e.log.Warn("removing a box directory without a record", "id", id)
		if err := e.rt.Destroy(ctx, id); err != nil {
			e.log.Error("destroy orphan box", "id", id, "err", err)
			continue
		}
		_ = os.RemoveAll(filepath.Join(e.dir, boxesDir, id))
	}
}
