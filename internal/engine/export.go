package engine

import (
	"net/http"
	"path/filepath"
	"strconv"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// handleExportCheckpoint streams a checkpoint's disk (the box's writable layer as it was when
// the checkpoint was taken) in the snapshot format: tar inside zstd. It reads the checkpoint's
// own copy, so the stream is coherent while the box keeps running. The stream's sha256, size and
// file count arrive as trailers, since they are known only at the end; a client must check them.
// This is a local-engine extension of the sandboxd API, announced in /v1/info.
func (e *Engine) handleExportCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	ck.mu.RLock() // a delete waits for the stream to end
	defer ck.mu.RUnlock()
	if ck.gone {
		return errUnknownCheckpoint
	}
	w.Header().Set("Content-Type", sandbox.DiskExportContentType)
	w.Header().Set("Trailer", sandbox.TrailerSHA256+", "+sandbox.TrailerBytes+", "+sandbox.TrailerFiles)
	w.WriteHeader(http.StatusOK)
	m, err := snapshot.Export(r.Context(), filepath.Join(e.checkpointDir(ck.rec.ID), "disk"), w)
	if err != nil {
		// The status is gone already; without the trailers the client knows the stream failed.
		e.log.Error("export checkpoint disk", "id", ck.rec.ID, "err", err)
		return nil
	}
	w.Header().Set(sandbox.TrailerSHA256, m.SHA256)
	w.Header().Set(sandbox.TrailerBytes, strconv.FormatInt(m.Bytes, 10))
	w.Header().Set(sandbox.TrailerFiles, strconv.FormatInt(m.Files, 10))
	return nil
}
