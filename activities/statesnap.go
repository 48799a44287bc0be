package activities

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// DefaultStatePaths are the trees a snapshot holds when the engine cannot export the box's disk
// (upstream sandboxd): the homes, where a user's work lives. What the image installed elsewhere
// comes back with the template.
var DefaultStatePaths = []string{"/home", "/root"}

// stateChunk is the most tar data one ImportRequest carries, as the agent's Export sends.
const stateChunk = 256 << 10

// statePaths are the trees a state snapshot holds, absolute and cleaned.
func (a *Snapshots) statePaths() []string {
	if len(a.StatePaths) == 0 {
		return DefaultStatePaths
	}
	return a.StatePaths
}

// uploadState takes snapshot row of the box on sandbox ref through its agent: each state path is
// read with State.Export and written, its names under the path (home/user/…), into one stream
// in the snapshot format, uploaded as the disk export is, and verified by reading it back.
// The agent reads a live tree: a file written meanwhile is taken as the read found it.
func (a *Snapshots) uploadState(ctx context.Context, row cocoonbox.Snapshot, ref sandbox.SandboxRef) (UploadSnapshotResult, error) {
	if a.Link == nil {
		return UploadSnapshotResult{}, newError(ErrTypeInvalidArgument, errors.New("the sandbox engine cannot export a box's disk and this worker has no agent link, so it cannot snapshot"))
	}
	if err := a.Store.MakeSnapshotState(ctx, row.ID); err != nil {
		return UploadSnapshotResult{}, classify(err)
	}
	b, err := a.Link.At(row.BoxID, ref)
	if err != nil {
		return UploadSnapshotResult{}, classify(err)
	}
	if err := a.Link.EnsureCredential(ctx, b); err != nil {
		return UploadSnapshotResult{}, classify(err)
	}
	key := SnapshotObjectKey(row.BoxID, row.ID)
	if _, err := a.Blobs.AbortIncomplete(ctx, key, 0); err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("abort earlier uploads of %s: %w", key, err))
	}
	var progress atomic.Int64
	phase := atomic.Pointer[string]{}
	setPhase := func(p string) { phase.Store(&p) }
	setPhase("upload")
	details := func() any { return uploadProgress{Phase: *phase.Load(), Bytes: progress.Load()} }
	return withHeartbeats(ctx, details, func(ctx context.Context) (UploadSnapshotResult, error) {
		created := time.Now().UTC()
		ex, err := a.pipeUpload(ctx, key, "read the box's trees through its agent", &progress,
			func(ctx context.Context, w io.Writer) (sandbox.DiskExport, error) { return a.writeState(ctx, b, w) })
		if err != nil {
			return UploadSnapshotResult{}, err
		}
		setPhase("verify")
		progress.Store(0)
		if err := a.verify(ctx, key, ex, &progress); err != nil {
			return UploadSnapshotResult{}, err
		}
		m := snapshot.Manifest{Version: snapshot.FormatVersion, SnapshotID: row.ID, BoxID: string(row.BoxID),
			ParentID: row.ParentID, Created: created, Bytes: ex.Bytes, SHA256: ex.SHA256, Files: ex.Files}
		if err := a.putManifest(ctx, m); err != nil {
			return UploadSnapshotResult{}, err
		}
		logger(ctx).Info("snapshot uploaded through the agent", "snapshot", row.ID, "bytes", ex.Bytes, "files", ex.Files)
		return UploadSnapshotResult{Bytes: ex.Bytes, SHA256: ex.SHA256, Files: ex.Files}, nil
	})
}

// writeState writes the box's state paths into w as one snapshot stream and returns its figures.
// A path the box does not have is left out; the restore then leaves the template's.
func (a *Snapshots) writeState(ctx context.Context, b boxlink.Box, w io.Writer) (sandbox.DiskExport, error) {
	h := newSumWriter(w)
	zw, err := zstd.NewWriter(h, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return sandbox.DiskExport{}, err
	}
	defer zw.Close()
	tw := tar.NewWriter(zw)
	var files int64
	err = a.Link.State(ctx, b, func(ctx context.Context, c agentvmv1.StateClient) error {
		for _, p := range a.statePaths() {
			n, err := exportTree(ctx, c, p, tw)
			if cocoonbox.ErrorCode(boxlink.Error(ctx, err)) == cocoonbox.ENotFound {
				continue
			}
			if err != nil {
				return fmt.Errorf("export %s: %w", p, err)
			}
			files += n
		}
		return nil
	})
	if err != nil {
		return sandbox.DiskExport{}, err
	}
	if err := tw.Close(); err != nil {
		return sandbox.DiskExport{}, err
	}
	if err := zw.Close(); err != nil {
		return sandbox.DiskExport{}, err
	}
	return sandbox.DiskExport{SHA256: h.sum(), Bytes: h.n, Files: files}, nil
}

// exportTree copies the agent's export of tree p into tw, its names under p's, and counts them.
func exportTree(ctx context.Context, c agentvmv1.StateClient, p string, tw *tar.Writer) (int64, error) {
	stream, err := c.Export(ctx, &agentvmv1.ExportRequest{Path: p})
	if err != nil {
		return 0, err
	}
	tr := tar.NewReader(&chunkReader{recv: stream.Recv})
	prefix := strings.TrimPrefix(path.Clean(p), "/")
	var n int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		name := path.Clean(hdr.Name)
		if name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return n, fmt.Errorf("the agent's export of %s names %q, outside it", p, hdr.Name)
		}
		hdr.Name = path.Join(prefix, name)
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return n, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return n, err
		}
		n++
	}
}

// importState restores a state snapshot's trees into the box b through its agent: the stream
// from r is split by state path, and each tree replaces the box's with State.Import. It returns
// once r is read to its end; the caller checks r's checksum.
func (a *Snapshots) importState(ctx context.Context, b boxlink.Box, r io.Reader) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	tops := map[string]string{} // "home" → "/home"
	for _, p := range a.statePaths() {
		tops[strings.TrimPrefix(path.Clean(p), "/")] = path.Clean(p)
	}
	err = a.Link.State(ctx, b, func(ctx context.Context, c agentvmv1.StateClient) error {
		var cur *treeImport
		done := map[string]bool{}
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%w: %v", errStateStream, err)
			}
			name := path.Clean(hdr.Name)
			top, rest, _ := strings.Cut(name, "/")
			target, ok := tops[top]
			if !ok {
				return fmt.Errorf("%w: %q is under no state path", errStateStream, hdr.Name)
			}
			if cur == nil || cur.target != target {
				if cur != nil {
					if err := cur.finish(); err != nil {
						return err
					}
				}
				if done[target] {
					return fmt.Errorf("%w: %s appears twice", errStateStream, target)
				}
				done[target] = true
				if cur, err = startTreeImport(ctx, c, target); err != nil {
					return err
				}
			}
			if rest == "" {
				rest = "."
			}
			hdr.Name = rest
			if hdr.Typeflag == tar.TypeDir {
				hdr.Name = strings.TrimSuffix(rest, "/") + "/"
			}
			if err := cur.tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := io.Copy(cur.tw, tr); err != nil {
				return err
			}
		}
		if cur != nil {
			return cur.finish()
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, zr) // to the end, so the caller's hash covers every byte
	return err
}

// errStateStream marks a state snapshot whose stream is not what uploadState writes.
var errStateStream = errors.New("not a state snapshot stream")

// treeImport is one State.Import in progress.
type treeImport struct {
	target string
	stream agentvmv1.State_ImportClient
	cw     *importChunks
	tw     *tar.Writer
}

func startTreeImport(ctx context.Context, c agentvmv1.StateClient, target string) (*treeImport, error) {
	stream, err := c.Import(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&agentvmv1.ImportRequest{Path: target}); err != nil {
		return nil, err
	}
	cw := &importChunks{stream: stream}
	return &treeImport{target: target, stream: stream, cw: cw, tw: tar.NewWriter(cw)}, nil
}

func (t *treeImport) finish() error {
	if err := t.tw.Close(); err != nil {
		return err
	}
	if err := t.cw.flush(); err != nil {
		return err
	}
	if _, err := t.stream.CloseAndRecv(); err != nil {
		return fmt.Errorf("import %s: %w", t.target, err)
	}
	return nil
}

// importChunks sends what is written as ImportRequests of stateChunk bytes at most.
type importChunks struct {
	stream agentvmv1.State_ImportClient
	buf    []byte
}

func (w *importChunks) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(stateChunk-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == stateChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *importChunks) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.stream.Send(&agentvmv1.ImportRequest{Data: w.buf})
	w.buf = make([]byte, 0, stateChunk)
	return err
}

// chunkReader reads the data of a stream of Chunks.
type chunkReader struct {
	recv func() (*agentvmv1.Chunk, error)
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		c, err := r.recv()
		if err != nil {
			return 0, err
		}
		r.buf = c.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// sumWriter hashes and counts what it passes on.
type sumWriter struct {
	w io.Writer
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newSumWriter(w io.Writer) *sumWriter { return &sumWriter{w: w, h: sha256.New()} }

func (s *sumWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	return n, err
}

func (s *sumWriter) sum() string { return hex.EncodeToString(s.h.Sum(nil)) }

// restoreState brings a state snapshot back on a new sandbox claimed from the template: once it
// answers, the snapshot's trees replace its own through its agent, the object hashed on the way.
// A retried restore adopts the sandbox its lost try claimed (the claim's ref) and imports again.
func (a *Snapshots) restoreState(ctx context.Context, in RestoreSnapshotInput, snap cocoonbox.Snapshot) (RestoreSnapshotResult, error) {
	if a.Link == nil {
		return RestoreSnapshotResult{}, newError(ErrTypeInvalidArgument, errors.New("snapshot "+snap.ID+" was taken through the box's agent and this worker has no agent link"))
	}
	size := orDefaultSize(in.Size)
	got, err := whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Claimed, error) {
		return a.Client.Claim(ctx, sandbox.ClaimRequest{Template: a.template(), Net: lane(in.Network),
			Egress: egressPolicy(in.Network), Size: string(size), TTLSeconds: int(in.TTL / time.Second),
			ClaimRef: ClaimRef(in.BoxID, in.Attempt)})
	})
	if err != nil {
		return RestoreSnapshotResult{}, classify(fmt.Errorf("claim a sandbox for snapshot %s: %w", snap.ID, err))
	}
	release := func() {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = a.Client.Release(relCtx, got.SandboxRef)
	}
	readyCtx, cancel := context.WithTimeout(ctx, restoreReadyTimeout)
	err = readyWithCredential(readyCtx, a.Client, got.SandboxRef, a.PollInterval, in.BoxID, a.Credentials)
	cancel()
	if err != nil {
		release()
		return RestoreSnapshotResult{}, classify(fmt.Errorf("restore snapshot %s: the new sandbox did not answer: %w", snap.ID, err))
	}
	b, err := a.Link.At(in.BoxID, got.SandboxRef)
	if err != nil {
		release()
		return RestoreSnapshotResult{}, classify(err)
	}
	// The sandbox answers an exec before its agent listens: the boot starts it.
	readyCtx, cancel = context.WithTimeout(ctx, restoreReadyTimeout)
	_, err = whileHeartbeating(readyCtx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, waitAgent(ctx, a.Link, b)
	})
	cancel()
	if err != nil {
		release()
		return RestoreSnapshotResult{}, classify(fmt.Errorf("restore snapshot %s: the new sandbox's agent did not answer: %w", snap.ID, err))
	}
	rc, err := a.Blobs.Get(ctx, snap.ObjectKey)
	if err != nil {
		release()
		return RestoreSnapshotResult{}, classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, err))
	}
	defer func() { _ = rc.Close() }()
	var read atomic.Int64
	hr := &hashingReader{r: rc, h: sha256.New(), n: &read}
	details := func() any { return uploadProgress{Phase: "import", Bytes: read.Load()} }
	_, err = withHeartbeats(ctx, details, func(ctx context.Context) (struct{}, error) {
		if err := a.importState(ctx, b, hr); err != nil {
			return struct{}{}, err
		}
		_, err := io.Copy(io.Discard, hr) // anything after the zstd stream counts too
		return struct{}{}, err
	})
	sum := hex.EncodeToString(hr.h.Sum(nil))
	switch {
	case errors.Is(hr.err, objstore.ErrCorrupt):
		err = corruptLayer(snap, snap, "its object %s fails the checksum stored with it", snap.ObjectKey)
	case hr.eof && (sum != snap.SHA256 || read.Load() != snap.Bytes):
		err = corruptLayer(snap, snap, "its object %s has sha256 %s, %s was stored", snap.ObjectKey, sum, snap.SHA256)
	case errors.Is(err, errStateStream):
		err = corruptLayer(snap, snap, "%v", err)
	case err == nil && !hr.eof:
		err = classify(fmt.Errorf("restore snapshot %s: the stream ended early", snap.ID))
	case err != nil:
		err = classify(fmt.Errorf("restore snapshot %s through the agent: %w", snap.ID, err))
	}
	if err != nil {
		release() // the box keeps its current sandbox
		return RestoreSnapshotResult{}, err
	}
	if err := a.Tokens.PutSandboxToken(ctx, string(in.BoxID), onNode(got, a.Node, "").SandboxRef); err != nil {
		return RestoreSnapshotResult{}, classify(fmt.Errorf("store sandbox token: %w", err))
	}
	return RestoreSnapshotResult{SnapshotID: snap.ID, TakenAt: snap.CreatedAt, SandboxID: got.ID, Deadline: got.Deadline}, nil
}

// agentPoll is how often waitAgent asks an agent that is not listening yet.
const agentPoll = 100 * time.Millisecond

// waitAgent returns once the box's agent answers (its version checked), asking again while it is
// unavailable: not listening yet, or its credential not taken yet.
func waitAgent(ctx context.Context, link *boxlink.Link, b boxlink.Box) error {
	for {
		err := link.CheckVersion(ctx, b)
		if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(agentPoll):
		}
	}
}

// orDefaultSize is s, or the default size when s is unset.
func orDefaultSize(s cocoonbox.Size) cocoonbox.Size {
	if s == "" {
		return cocoonbox.DefaultSize
	}
	return s
}
