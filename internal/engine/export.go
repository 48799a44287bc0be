package engine

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// maxBaseIndex bounds the base index an incremental export reads (compressed): an index line is
// about 60 bytes before zstd, so this holds millions of entries.
const maxBaseIndex = 256 << 20

// handleExportCheckpoint streams a checkpoint's disk (the box's writable layer as it was when
// the checkpoint was taken) in the snapshot format: tar inside zstd. It reads the checkpoint's
// own copy, so the stream is coherent while the box keeps running. The stream's sha256, size and
// file count arrive as trailers, since they are known only at the end; a client must check them.
// A POST carries the index of an earlier export as its body and gets an incremental stream
// against it. Either way the index of this disk is kept with the checkpoint, for GET
// /v1/checkpoints/{id}/disk/index. A local-engine extension of the sandboxd API, announced in
// /v1/info.
func (e *Engine) handleExportCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	var opts snapshot.ExportOptions
	if r.Method == http.MethodPost {
		if opts.Base, err = snapshot.ReadIndex(http.MaxBytesReader(w, r.Body, maxBaseIndex), 0); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) || errors.Is(err, snapshot.ErrLimit) {
				return newError(kindTooLarge, "base index: %s", err.Error())
			}
			return invalid("base index: %s", err.Error())
		}
	}
	ck.mu.RLock() // a delete waits for the stream to end
	defer ck.mu.RUnlock()
	if ck.gone {
		return errUnknownCheckpoint
	}
	var index bytes.Buffer
	opts.Index = &index
	w.Header().Set("Content-Type", sandbox.DiskExportContentType)
	w.Header().Set("Trailer", sandbox.TrailerSHA256+", "+sandbox.TrailerBytes+", "+sandbox.TrailerFiles+", "+sandbox.TrailerDeleted)
	w.WriteHeader(http.StatusOK)
	m, err := snapshot.ExportWith(r.Context(), filepath.Join(e.checkpointDir(ck.rec.ID), "disk"), w, opts)
	if err == nil {
		err = writeFileAtomic(e.checkpointIndex(ck.rec.ID), index.Bytes())
	}
	if err != nil {
		// The status is gone already; without the trailers the client knows the stream failed.
		e.log.Error("export checkpoint disk", "id", ck.rec.ID, "err", err)
		return nil
	}
	w.Header().Set(sandbox.TrailerSHA256, m.SHA256)
	w.Header().Set(sandbox.TrailerBytes, strconv.FormatInt(m.Bytes, 10))
	w.Header().Set(sandbox.TrailerFiles, strconv.FormatInt(m.Files, 10))
	w.Header().Set(sandbox.TrailerDeleted, strconv.FormatInt(m.Deleted, 10))
	return nil
}

// handleCheckpointIndex serves the index of a checkpoint's disk that its last export wrote: the
// base the next incremental export of the box is made against.
func (e *Engine) handleCheckpointIndex(w http.ResponseWriter, r *http.Request, c caller) error {
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	ck.mu.RLock()
	defer ck.mu.RUnlock()
	if ck.gone {
		return errUnknownCheckpoint
	}
	data, err := os.ReadFile(e.checkpointIndex(ck.rec.ID))
	if errors.Is(err, os.ErrNotExist) {
		return newError(kindConflict, "the checkpoint's disk has no index yet: export it first")
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", sandbox.DiskExportContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}
