package activities

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Recorder records a box's desktop while an agent run goes: it is an RFB client of the box's
// Xvnc (through the engine's ports relay, in a shared session; it sends no input), and what the
// server sends goes to the bucket in gzip chunks as it comes, each byte with the time it came.
// A player replays them in noVNC, which is why the recorder asks for noVNC's own pixel format.
type Recorder struct {
	Client sandbox.Client
	Tokens TokenStore
	Blobs  objstore.Store
	Store  RecordingStore
	// Wake brings the box up through its workflow first, so the recorder never wakes a sleeping
	// sandbox behind it; nil skips it.
	Wake func(ctx context.Context, box cocoonbox.BoxID) error
	// Every is how often it asks for the screen's changes (0: 100 ms), and ChunkEvery how
	// often a chunk goes to the bucket (0: 2 s).
	Every, ChunkEvery time.Duration
}

// RecordingStore keeps recordings' rows.
type RecordingStore interface {
	PutRecording(ctx context.Context, r store.Recording) error
}

// RecordInput names the run whose box's desktop is recorded.
type RecordInput struct {
	RunID string
	BoxID cocoonbox.BoxID
}

// DesktopPort is the box's RFB port (Xvnc on its loopback).
const DesktopPort = 5900

// A recording is a sequence of records: a 4-byte time (milliseconds since the recording's start)
// and a 4-byte length, both big-endian, then that many bytes the server sent. A record of length
// RecordingRestart starts a new RFB session (the recorder connected again), with no bytes.
const RecordingRestart = 0xFFFFFFFF

// recordProgress is what a recorder's heartbeats carry, so a retry goes on with the next chunk.
type recordProgress struct {
	Started time.Time
	Seq     int
	Bytes   int64
}

// RecordDesktop records until the run cancels it (the run's end), then writes its last chunk. A
// connection that breaks (the box slept) is made again, starting a new RFB session.
func (r *Recorder) RecordDesktop(ctx context.Context, in RecordInput) error {
	var p recordProgress
	if activity.IsActivity(ctx) && activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &p)
	}
	if p.Started.IsZero() {
		p.Started = time.Now()
	}
	rec := &recording{r: r, in: in, p: p}
	for ctx.Err() == nil {
		err := rec.session(ctx)
		if ctx.Err() == nil && activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Info("recording session ended; connecting again", "run", in.RunID, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	// The run ended: the last chunk and the end, on a context of their own.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return rec.flush(fctx, true)
}

// recording is one recorder's state: the chunk being filled and what went out.
type recording struct {
	r     *Recorder
	in    RecordInput
	mu    sync.Mutex
	chunk bytes.Buffer
	gz    *gzip.Writer
	n     int // records in the chunk
	p     recordProgress
}

// add appends a record of data at now.
func (rec *recording) add(now time.Time, data []byte, length uint32) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.gz == nil {
		rec.gz, _ = gzip.NewWriterLevel(&rec.chunk, gzip.BestSpeed)
	}
	var h [8]byte
	binary.BigEndian.PutUint32(h[:4], uint32(now.Sub(rec.p.Started).Milliseconds()))
	binary.BigEndian.PutUint32(h[4:], length)
	_, _ = rec.gz.Write(h[:])
	_, _ = rec.gz.Write(data)
	rec.n++
}

// flush sends the chunk being filled to the bucket, records the row and heartbeats; end also
// marks the recording ended.
func (rec *recording) flush(ctx context.Context, end bool) error {
	rec.mu.Lock()
	var body []byte
	if rec.n > 0 {
		_ = rec.gz.Close()
		body = bytes.Clone(rec.chunk.Bytes())
		rec.chunk.Reset()
		rec.gz, rec.n = nil, 0
	}
	seq := rec.p.Seq
	rec.mu.Unlock()
	if body != nil {
		if err := rec.r.Blobs.Put(ctx, objstore.RecordingKey(rec.in.RunID, seq), bytes.NewReader(body), int64(len(body))); err != nil {
			return classify(fmt.Errorf("store recording chunk %d: %w", seq, err))
		}
		rec.p.Seq++
		rec.p.Bytes += int64(len(body))
	}
	row := store.Recording{RunID: rec.in.RunID, BoxID: rec.in.BoxID, StartedAt: rec.p.Started, Chunks: rec.p.Seq, Bytes: rec.p.Bytes}
	if end {
		now := time.Now()
		row.Ended = &now
	}
	if err := rec.r.Store.PutRecording(ctx, row); err != nil {
		return classify(err)
	}
	if activity.IsActivity(ctx) { // also run outside a worker, by the benchmarks
		activity.RecordHeartbeat(ctx, rec.p)
	}
	return nil
}

// session records one RFB connection to the box until it breaks or ctx ends.
func (rec *recording) session(ctx context.Context) error {
	if rec.r.Wake != nil {
		if err := rec.r.Wake(ctx, rec.in.BoxID); err != nil {
			return err
		}
	}
	ref, err := rec.r.Tokens.SandboxToken(ctx, string(rec.in.BoxID))
	if err != nil {
		return err
	}
	conn, err := engineAt(rec.r.Client, ref.Addr).DialPort(ctx, ref, DesktopPort)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	br := bufio.NewReaderSize(conn, 64<<10)
	rec.add(time.Now(), nil, RecordingRestart)
	w, h, err := rec.handshake(conn, br)
	if err != nil {
		return err
	}
	every, chunkEvery := cmp.Or(rec.r.Every, 100*time.Millisecond), cmp.Or(rec.r.ChunkEvery, 2*time.Second)
	if _, err := conn.Write(viewerSetup(w, h)); err != nil {
		return err
	}
	read := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				rec.add(time.Now(), buf[:n], uint32(n))
			}
			if err != nil {
				read <- err
				return
			}
		}
	}()
	ask, flush := time.NewTicker(every), time.NewTicker(chunkEvery)
	defer ask.Stop()
	defer flush.Stop()
	for {
		select {
		case err := <-read:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-ask.C:
			if _, err := conn.Write(updateRequest(true, w, h)); err != nil {
				return err
			}
		case <-flush.C:
			if err := rec.flush(ctx, false); err != nil {
				return err
			}
		}
	}
}

// handshake is the client side of RFB 3.8 with no authentication (the box's Xvnc offers none:
// only the engine's relay reaches it), in a shared session. Every byte the server sends is
// recorded, so a player can hand the same handshake to noVNC. It returns the screen's size.
func (rec *recording) handshake(conn io.Writer, br *bufio.Reader) (w, h uint16, err error) {
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		rec.add(time.Now(), b, uint32(n))
		return b, nil
	}
	if v, err := read(12); err != nil || string(v) != "RFB 003.008\n" {
		return 0, 0, fmt.Errorf("rfb: server version %q: %v", v, err)
	}
	if _, err := conn.Write([]byte("RFB 003.008\n")); err != nil {
		return 0, 0, err
	}
	n, err := read(1)
	if err != nil || n[0] == 0 {
		return 0, 0, fmt.Errorf("rfb: no security types: %v", err)
	}
	types, err := read(int(n[0]))
	if err != nil || !bytes.Contains(types, []byte{1}) {
		return 0, 0, fmt.Errorf("rfb: security types %v offer no None: %v", types, err)
	}
	if _, err := conn.Write([]byte{1}); err != nil {
		return 0, 0, err
	}
	if res, err := read(4); err != nil || binary.BigEndian.Uint32(res) != 0 {
		return 0, 0, fmt.Errorf("rfb: security result %v: %v", res, err)
	}
	if _, err := conn.Write([]byte{1}); err != nil { // ClientInit: shared
		return 0, 0, err
	}
	init, err := read(24)
	if err != nil {
		return 0, 0, fmt.Errorf("rfb: server init: %w", err)
	}
	if nameLen := binary.BigEndian.Uint32(init[20:]); nameLen > 4096 {
		return 0, 0, errors.New("rfb: server init names a desktop over 4096 bytes")
	} else if _, err := read(int(nameLen)); err != nil {
		return 0, 0, fmt.Errorf("rfb: server init: %w", err)
	}
	return binary.BigEndian.Uint16(init[0:]), binary.BigEndian.Uint16(init[2:]), nil
}

// viewerSetup is what the recorder asks of the server: noVNC's pixel format (32 bits, depth 24,
// little-endian, red at bit 0), the Raw encoding and screen size changes, and the whole screen.
func viewerSetup(w, h uint16) []byte {
	pf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0}
	enc := []byte{2, 0, 0, 2}
	enc = binary.BigEndian.AppendUint32(enc, 0) // Raw
	desktopSize := int32(-223)
	enc = binary.BigEndian.AppendUint32(enc, uint32(desktopSize)) // DesktopSize
	out := append(pf, enc...)
	return append(out, updateRequest(false, w, h)...)
}

// updateRequest is a FramebufferUpdateRequest of the whole w x h screen.
func updateRequest(incremental bool, w, h uint16) []byte {
	b := []byte{3, 0, 0, 0, 0, 0}
	if incremental {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint16(b, w)
	return binary.BigEndian.AppendUint16(b, h)
}
