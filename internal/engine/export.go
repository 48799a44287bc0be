package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
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
// against it; a checkpoint of what changed since an index (handleCheckpointSince) is exported
// against that index alone. Either way the index of this disk is kept with the checkpoint, for
// GET /v1/checkpoints/{id}/disk/index. A local-engine extension of the sandboxd API, announced
// in /v1/info.
func (e *Engine) handleExportCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	var opts snapshot.ExportOptions
	var baseSum string
	if r.Method == http.MethodPost {
		var data []byte
		if data, opts.Base, err = readBaseIndex(w, r); err != nil {
			return err
		}
		baseSum = indexSum(data)
	}
	if ck.rec.Since != "" && baseSum != ck.rec.Since {
		return newError(kindConflict, "checkpoint %s holds only what changed since an earlier export: export it against that export's index", ck.rec.ID)
	}
	ck.mu.RLock() // a delete waits for the stream to end
	defer ck.mu.RUnlock()
	if ck.gone {
		return errUnknownCheckpoint
	}
	var index bytes.Buffer
	if ck.rec.Since != "" {
		// The copier wrote this disk's whole index beside what it copied: it is the index.
		if opts.Taken, err = readIndexFile(e.checkpointIndex(ck.rec.ID)); err != nil {
			return err
		}
	} else {
		opts.Index = &index
	}
	w.Header().Set("Content-Type", sandbox.DiskExportContentType)
	w.Header().Set("Trailer", sandbox.TrailerSHA256+", "+sandbox.TrailerBytes+", "+sandbox.TrailerFiles+", "+sandbox.TrailerDeleted)
	w.WriteHeader(http.StatusOK)
	m, err := snapshot.ExportWith(r.Context(), filepath.Join(e.checkpointDir(ck.rec.ID), "disk"), w, opts)
	if err == nil && opts.Index != nil {
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

// handleCheckpointSince saves, of a sandbox's disk, what changed since an earlier export whose
// index is the body, as a checkpoint that an export against that same index reads (a claim
// cannot): the checkpoint of an incremental snapshot pauses the sandbox for what changed, not
// for a copy of its whole disk. Tokens as for a checkpoint, the sandbox's in the Sandbox-Token
// header, the name in the query. A local-engine extension, announced in /v1/info.
func (e *Engine) handleCheckpointSince(w http.ResponseWriter, r *http.Request, c caller) error {
	if _, ok := e.rt.(runtime.DiffSnapshotter); !ok || e.noExport {
		return invalid("the %s runtime cannot copy what changed of a disk (Info's checkpoint_since is false)", e.rt.Name())
	}
	name := r.URL.Query().Get("name")
	b, err := e.checkpointed(r.PathValue("id"), name, r.Header.Get(sandbox.HeaderSandboxToken), c)
	if err != nil {
		return err
	}
	base, _, err := readBaseIndex(w, r)
	if err != nil {
		return err
	}
	ck, err := e.takeCheckpoint(r.Context(), b, c, name, nil, base)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.CheckpointResponse{Checkpoint: ck.body()})
	return nil
}

// readBaseIndex reads the index of an earlier export from r's body, checking that it is one.
func readBaseIndex(w http.ResponseWriter, r *http.Request) ([]byte, *snapshot.Index, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBaseIndex))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, nil, newError(kindTooLarge, "base index: over %d bytes", maxBaseIndex)
		}
		return nil, nil, invalid("base index: %s", err.Error())
	}
	x, err := snapshot.ReadIndex(bytes.NewReader(data), 0)
	if errors.Is(err, snapshot.ErrLimit) {
		return nil, nil, newError(kindTooLarge, "base index: %s", err.Error())
	}
	if err != nil {
		return nil, nil, invalid("base index: %s", err.Error())
	}
	return data, x, nil
}

// readIndexFile reads an index the engine wrote.
func readIndexFile(path string) (*snapshot.Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint index: %w", err)
	}
	defer func() { _ = f.Close() }()
	return snapshot.ReadIndex(f, 0)
}

// indexSum names an index stream by its sha256, so an export can tell it is the one a
// checkpoint of what changed was taken against.
func indexSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
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
