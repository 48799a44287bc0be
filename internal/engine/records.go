package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// On-disk layout under Options.Dir. Records are one small JSON file each, written by
// write-then-rename, so an engine killed mid-write leaves either the old or the new record and a
// write touches only the sandbox it concerns (no engine-wide lock, no rewrite of every record
// on every renew).
//
//	engine.lock                  held while an engine runs on Dir
//	runtime.json                 the runtime that runs this directory's boxes
//	records/sb_….json            one per sandbox (claimed, warm or half-started), 0600: holds its token
//	boxes/sb_…/                  the runtime's per-box directory (Spec.Dir)
//	checkpoints/ck_….json        checkpoint metadata, written last: no file, no checkpoint
//	checkpoints/ck_…/            the checkpoint's disk, as runtime.Snapshot wrote it
//	pools.json                   the warm-pool targets from PUT /v1/pools
//	usage.jsonl                  the append-only usage journal
const (
	recordsDir     = "records"
	boxesDir       = "boxes"
	checkpointsDir = "checkpoints"
	poolsFile      = "pools.json"
	journalFile    = "usage.jsonl"
	lockFile       = "engine.lock"
	runtimeFile    = "runtime.json"
)

// recordVersion is bumped when a record's meaning changes incompatibly.
const recordVersion = 1

// record is what the engine keeps of one sandbox. Tenant is a digest of the tenant token that
// claimed it (never the token itself); the sandbox token is stored because GET
// /v1/sandboxes/{id} must return it to the operator and it must keep working after a restart.
type record struct {
	Version              int             `json:"version"`
	ID                   string          `json:"id"`
	Token                string          `json:"token,omitempty"`
	Key                  sandbox.PoolKey `json:"key"`
	Tenant               string          `json:"tenant,omitempty"`
	ClaimRef             string          `json:"claim_ref,omitempty"`
	ClaimedAt            time.Time       `json:"claimed_at,omitzero"`
	Deadline             time.Time       `json:"deadline,omitzero"`
	Hibernated           bool            `json:"hibernated,omitempty"`
	IdleHibernateSeconds int             `json:"idle_hibernate_seconds,omitempty"`
	FromCheckpoint       string          `json:"from_checkpoint,omitempty"`
	// Warm marks a pool box nobody has claimed yet.
	Warm bool `json:"warm,omitempty"`
	// Pending marks a box whose start has not finished: a restart finds it half-made and
	// destroys it, since nobody was handed its token.
	Pending bool `json:"pending,omitempty"`
	// Released marks a box whose destroy failed; the reaper and the next start retry it.
	Released bool `json:"released,omitempty"`
}

// checkpointRecord is a checkpoint's metadata file.
type checkpointRecord struct {
	ID        string          `json:"id"`
	Name      string          `json:"name,omitempty"`
	SandboxID string          `json:"sandbox_id"`
	Key       sandbox.PoolKey `json:"key"`
	Tenant    string          `json:"tenant,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Memory    bool            `json:"memory,omitempty"` // the checkpoint holds a memory image beside the disk
	// Since is the sha256 of the base index a checkpoint of what changed was taken against
	// (handleCheckpointSince); its disk holds only that, so only an export against it reads it.
	Since string `json:"since,omitempty"`
}

func (e *Engine) recordPath(id string) string {
	return filepath.Join(e.dir, recordsDir, id+".json")
}

func (e *Engine) boxDir(id string) string { return filepath.Join(e.dir, boxesDir, id) }

func (e *Engine) checkpointDir(id string) string { return filepath.Join(e.dir, checkpointsDir, id) }

// checkpointIndex is where the index of checkpoint id's disk is kept once it was exported.
func (e *Engine) checkpointIndex(id string) string {
	return filepath.Join(e.checkpointDir(id), runtime.DiskIndexFile) // where SnapshotSince writes it too
}

func (e *Engine) checkpointMeta(id string) string {
	return filepath.Join(e.dir, checkpointsDir, id+".json")
}

// writeFileAtomic writes data to path through a temporary file, fsyncs it, renames it into
// place and fsyncs the directory, so a crash leaves the old content or the new, never a torn
// file. Files are 0600: records hold sandbox tokens.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(0o600)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// save writes b's record. saveMu orders concurrent saves of one box so the last write carries
// the newest state; a dropped box is never written again.
func (e *Engine) save(b *box) error {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	b.mu.Lock()
	rec, dropped := b.rec, b.dropped
	b.mu.Unlock()
	if dropped {
		return nil
	}
	return writeJSONFile(e.recordPath(rec.ID), rec)
}

// drop removes b's record file for good.
func (e *Engine) drop(b *box) {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	b.mu.Lock()
	b.dropped = true
	id := b.rec.ID
	b.mu.Unlock()
	if err := os.Remove(e.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Error("remove sandbox record", "id", id, "err", err)
	}
}

// loadRecords reads every sandbox record. A file that cannot be parsed is logged and skipped,
// not deleted: it may hold the only copy of a token.
func (e *Engine) loadRecords() ([]record, error) {
	entries, err := os.ReadDir(filepath.Join(e.dir, recordsDir))
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	var recs []record
	for _, ent := range entries {
		name := ent.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp") {
			_ = os.Remove(filepath.Join(e.dir, recordsDir, name)) // a write cut short by a crash
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		var rec record
		data, err := os.ReadFile(filepath.Join(e.dir, recordsDir, name))
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err == nil && (!validSandboxID(rec.ID) || rec.ID+".json" != name) {
			err = errors.New("id does not match the file name")
		}
		if err == nil && rec.Version > recordVersion {
			err = fmt.Errorf("written by a newer engine (record version %d)", rec.Version)
		}
		if err != nil {
			e.log.Error("skipping unreadable sandbox record", "file", name, "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// loadCheckpoints reads every checkpoint's metadata and removes checkpoint directories whose
// metadata was never written (a snapshot cut short).
func (e *Engine) loadCheckpoints() (map[string]*checkpoint, error) {
	root := filepath.Join(e.dir, checkpointsDir)
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	cks := map[string]*checkpoint{}
	for _, ent := range entries {
		name, ok := strings.CutSuffix(ent.Name(), ".json")
		if !ok || ent.IsDir() {
			continue
		}
		var rec checkpointRecord
		data, err := os.ReadFile(filepath.Join(root, ent.Name()))
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err != nil || rec.ID != name {
			e.log.Error("skipping unreadable checkpoint record", "file", ent.Name(), "err", err)
			continue
		}
		cks[rec.ID] = &checkpoint{rec: rec}
	}
	for _, ent := range entries {
		if ent.IsDir() && cks[ent.Name()] == nil {
			e.log.Warn("removing incomplete checkpoint", "id", ent.Name())
			_ = os.RemoveAll(filepath.Join(root, ent.Name()))
		}
	}
	return cks, nil
}
