package engine

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// handleImportCheckpoint makes a checkpoint from a disk stream in the snapshot format (what
// GET /v1/checkpoints/{id}/disk produced, possibly on another node or restored from S3), so a
// claim from it brings a box back with that disk. The stream's sha256 is required up front and
// checked before the checkpoint exists: a corrupted stream leaves nothing behind. The query
// names the key (template, net, size) boxes claimed from it get, and an optional name.
// A local-engine extension, announced as disk_export in /v1/info.
func (e *Engine) handleImportCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	key, err := e.parseKey(q.Get("template"), q.Get("net"), q.Get("size"))
	if err != nil {
		return err
	}
	if _, err := e.rootfs(key.Template); err != nil {
		return err
	}
	name := q.Get("name")
	if name != "" && !checkpointNameRe.MatchString(name) {
		return invalid("name: 1-63 letters, digits and . _ : / -, starting with a letter or digit; got %q", name)
	}
	want := snapshot.Manifest{SHA256: r.Header.Get(sandbox.TrailerSHA256)}
	if len(want.SHA256) != 64 {
		return invalid("%s: the stream's sha256 (64 hex digits) is required", sandbox.TrailerSHA256)
	}
	if v := r.Header.Get(sandbox.TrailerBytes); v != "" {
		if want.Bytes, err = strconv.ParseInt(v, 10, 64); err != nil || want.Bytes < 0 {
			return invalid("%s: not a byte count: %q", sandbox.TrailerBytes, v)
		}
	}

	id := newCheckpointID()
	dir := e.checkpointDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create checkpoint: %w", err)
	}
	// The default limits: the stream is a box's disk, as big as the box made it.
	if _, err := snapshot.ImportLimits(r.Context(), r.Body, filepath.Join(dir, "disk"), want, snapshot.Limits{}); err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, snapshot.ErrChecksumMismatch) || errors.Is(err, snapshot.ErrUnsafePath) {
			return invalid("%s", err.Error())
		}
		if errors.Is(err, snapshot.ErrLimit) {
			return newError(kindTooLarge, "%s", err.Error())
		}
		return fmt.Errorf("import checkpoint disk: %w", err)
	}
	ck := &checkpoint{rec: checkpointRecord{ID: id, Name: name, Key: key, Tenant: c.tenant, CreatedAt: e.now()}}
	if err := writeJSONFile(e.checkpointMeta(id), ck.rec); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	e.mu.Lock()
	e.checkpoints[id] = ck
	e.mu.Unlock()
	e.metrics.count("checkpoints", "imported")
	writeJSON(w, http.StatusOK, sandbox.CheckpointResponse{Checkpoint: ck.body()})
	return nil
}
