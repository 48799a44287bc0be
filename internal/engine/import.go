package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// handleImportCheckpoint makes a checkpoint from a disk stream in the snapshot format (what
// GET /v1/checkpoints/{id}/disk produced, possibly on another node or restored from S3), or from
// a chain of them (a full stream and the incremental ones after it, HeaderLayers), so a claim
// from it brings a box back with that disk. Every stream's sha256 is required up front and
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
	unpack, err := importBody(r)
	if err != nil {
		return err
	}

	id := newCheckpointID()
	dir := e.checkpointDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create checkpoint: %w", err)
	}
	if err := unpack(r.Context(), filepath.Join(dir, "disk")); err != nil {
		_ = os.RemoveAll(dir)
		return importError(err)
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

// handleImportClaim claims a new sandbox whose disk is a disk stream in the snapshot format, or
// a chain of them, as an import takes them: unpacked straight into the disk the sandbox runs on,
// so a restore does not make a checkpoint that its claim then copies whole. The query names the
// key, the lease (ttl_seconds) and the claim_ref; every stream is checked before the sandbox
// starts, and a failed one leaves nothing. A local-engine extension, announced as import_claim
// in /v1/info.
func (e *Engine) handleImportClaim(w http.ResponseWriter, r *http.Request, c caller) error {
	filler, ok := e.rt.(runtime.DiskFiller)
	if !ok || e.noExport {
		return invalid("the %s runtime cannot unpack a disk into a new sandbox (Info's import_claim is false)", e.rt.Name())
	}
	q := r.URL.Query()
	key, err := e.parseKey(q.Get("template"), q.Get("net"), q.Get("size"))
	if err != nil {
		return err
	}
	seconds := 0
	if v := q.Get("ttl_seconds"); v != "" {
		if seconds, err = strconv.Atoi(v); err != nil {
			return invalid("ttl_seconds: not a number of seconds: %q", v)
		}
	}
	ttl, err := leaseTTL(seconds)
	if err != nil {
		return err
	}
	claimRef := q.Get("claim_ref")
	if len(claimRef) > maxClaimRef {
		return invalid("claim_ref: longer than %d bytes", maxClaimRef)
	}
	rootfs, err := e.rootfs(key.Template)
	if err != nil {
		return err
	}
	unpack, err := importBody(r)
	if err != nil {
		return err
	}
	start := time.Now()
	b, err := e.reserve(key)
	if err != nil {
		return err
	}
	rec, _ := b.snapshot()
	spec := e.spec(rec, rootfs)
	err = os.RemoveAll(spec.Dir)
	if err == nil {
		err = filler.Fill(r.Context(), spec, unpack)
	}
	if err != nil {
		e.discard(r.Context(), b)
		if errors.Is(err, runtime.ErrDiskFull) {
			return &apiError{kind: kindTooLarge, msg: fmt.Sprintf("the snapshot's files do not fit in the sandbox's disk of %d MiB; claim a larger size", spec.DiskMB), err: err}
		}
		return importError(err)
	}
	if err := e.start(r.Context(), b, rootfs); err != nil {
		return err
	}
	if err := e.finishClaim(b, c, ttl, claimRef, ""); err != nil {
		e.discard(r.Context(), b)
		return err
	}
	e.metrics.claimed("import", time.Since(start))
	writeJSON(w, http.StatusOK, e.claimResponse(b))
	return nil
}

// importBody reads what an import's streams must be from r's headers and returns the function
// that unpacks its body into a directory, checking every stream and that nothing follows them.
func importBody(r *http.Request) (func(ctx context.Context, dir string) error, error) {
	layers, err := importLayers(r)
	if err != nil {
		return nil, err
	}
	body := &exactBody{r: r.Body}
	for i := range layers {
		layers[i].R = body.next(layers[i].Want.Bytes, i == len(layers)-1)
	}
	return func(ctx context.Context, dir string) error {
		// The default limits: the stream is a box's disk, as big as the box made it.
		if _, err := snapshot.ImportChain(ctx, layers, dir, snapshot.Limits{}); err != nil {
			return err
		}
		return body.end()
	}, nil
}

// importError is the answer to an import whose streams could not be unpacked.
func importError(err error) error {
	if errors.Is(err, snapshot.ErrChecksumMismatch) || errors.Is(err, snapshot.ErrUnsafePath) || errors.Is(err, errBodyLength) {
		return invalid("%s", err.Error())
	}
	if errors.Is(err, snapshot.ErrLimit) {
		return newError(kindTooLarge, "%s", err.Error())
	}
	return fmt.Errorf("import checkpoint disk: %w", err)
}

// maxLayers bounds the chain one import takes.
const maxLayers = 256

// importLayers reads what the import's streams must be: HeaderLayers for a chain, else the one
// stream's sha256 and size headers.
func importLayers(r *http.Request) ([]snapshot.Layer, error) {
	list := r.Header.Get(sandbox.HeaderLayers)
	if list == "" {
		want := snapshot.Manifest{SHA256: r.Header.Get(sandbox.TrailerSHA256)}
		if len(want.SHA256) != 64 {
			return nil, invalid("%s: the stream's sha256 (64 hex digits) is required", sandbox.TrailerSHA256)
		}
		if v := r.Header.Get(sandbox.TrailerBytes); v != "" {
			var err error
			if want.Bytes, err = strconv.ParseInt(v, 10, 64); err != nil || want.Bytes < 0 {
				return nil, invalid("%s: not a byte count: %q", sandbox.TrailerBytes, v)
			}
		}
		return []snapshot.Layer{{Want: want}}, nil
	}
	parts := strings.Split(list, ",")
	if len(parts) > maxLayers {
		return nil, invalid("%s: %d layers, at most %d", sandbox.HeaderLayers, len(parts), maxLayers)
	}
	layers := make([]snapshot.Layer, len(parts))
	for i, p := range parts {
		sum, n, ok := strings.Cut(strings.TrimSpace(p), ":")
		size, err := strconv.ParseInt(n, 10, 64)
		if !ok || len(sum) != 64 || err != nil || size <= 0 {
			return nil, invalid("%s: layer %d: want sha256:bytes, got %q", sandbox.HeaderLayers, i+1, p)
		}
		layers[i].Want = snapshot.Manifest{SHA256: sum, Bytes: size}
	}
	return layers, nil
}

// errBodyLength marks an import body longer or shorter than its layers say.
var errBodyLength = errors.New("the body does not match the layers' sizes")

// exactBody splits an import body into its layers by their sizes.
type exactBody struct{ r io.Reader }

// next is the reader of the next layer, n bytes long (0 for a lone stream of unknown size: the
// rest of the body).
func (b *exactBody) next(n int64, last bool) io.Reader {
	if n <= 0 && last {
		return b.r
	}
	return io.LimitReader(b.r, n)
}

// end checks that nothing follows the last layer.
func (b *exactBody) end() error {
	var one [1]byte
	if k, _ := io.ReadFull(b.r, one[:]); k > 0 {
		return fmt.Errorf("import checkpoint disk: %w: data follows the last layer", errBodyLength)
	}
	return nil
}
