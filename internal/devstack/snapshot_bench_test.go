package devstack_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// writeState fills a box with 1 GiB of state shaped like a user's: half that does not compress
// (media, build outputs) in one file, half text in 64 files of 8 MiB.
const writeState = `set -e
mkdir -p /root/state && cd /root/state
head -c 512M /dev/urandom > random.bin
i=0; while [ $i -lt 64 ]; do
	yes "line $i of a log a user keeps, with words that compress: $(date +%s%N)" | head -c 8M > text$i.log
	i=$((i+1))
done`

// BenchmarkSnapshot1GiB: a box with 1 GiB of state is snapshotted through its workflow
// (checkpoint, engine disk export streamed into an S3 multipart upload, read-back verification,
// manifest, rows) and restored from it (object streamed into the engine with its checksum
// checked, claim, ready probe, swap), each as the state's bytes over the time taken; beside them
// the engine alone (checkpoint, then its disk export into nothing) and the raw rate of
// `tar | zstd > /dev/null` of the same tree on the host, in the same run.
func BenchmarkSnapshot1GiB(b *testing.B) {
	e := newBoxBench(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	e.ctx = ctx
	id := e.create(b)
	st, err := e.d.Boxes.Get(ctx, e.owner, id)
	if err != nil {
		b.Fatal(err)
	}
	p := st.Policy
	p.KeepSnapshots = 1 // each iteration's snapshot replaces the last, so the disk stays bounded
	if _, err := e.d.Boxes.SetPolicy(ctx, e.owner, id, p); err != nil {
		b.Fatal(err)
	}
	row, err := e.eng.Get(ctx, st.SandboxID)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.eng.Exec(ctx, sandbox.SandboxRef{ID: row.ID, Token: row.Token},
		sandbox.ExecRequest{Argv: []string{"sh", "-c", writeState}, TimeoutSeconds: 600})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("write the state: %+v, %v", res, err)
	}
	disk := func() string {
		st, err := e.d.Boxes.Get(ctx, e.owner, id)
		if err != nil {
			b.Fatal(err)
		}
		return filepath.Join(e.d.Home(), "engine", "boxes", st.SandboxID, "vol", "disk")
	}
	size := treeBytes(b, disk())
	b.Logf("box state: %d bytes", size)

	var snapID string
	var objectBytes int64
	b.Run("Box", func(b *testing.B) {
		var samples []time.Duration
		for b.Loop() {
			dropSnapshots(ctx, b, e.d.Store, e.d.Blobs, id) // so each is the box's first: full
			start := time.Now()
			r, err := e.d.Boxes.Snapshot(ctx, e.owner, id)
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			snapID, objectBytes = r.Snapshot.ID, r.Snapshot.Bytes
			b.ReportMetric(float64(r.Snapshot.Bytes)/(1<<20), "object-MiB")
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("BoxRestore", func(b *testing.B) {
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			st, err := e.d.Boxes.Restore(ctx, e.owner, id, snapID)
			samples = append(samples, time.Since(start))
			if err != nil || st.State != cocoonbox.BoxStateRunning {
				b.Fatalf("restore: %+v, %v", st, err)
			}
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("RawS3Download", func(b *testing.B) {
		// The snapshot's object read from the S3 server into nothing: the S3 part of the
		// restore's path alone.
		snap, err := e.d.Store.SnapshotByID(ctx, snapID)
		if err != nil {
			b.Fatal(err)
		}
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := readObject(ctx, e.d.Blobs, snap.ObjectKey, io.Discard); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		benchreport.Throughput(b, size, samples)
	})
	var imported []time.Duration
	b.Run("RawEngineRestore", func(b *testing.B) {
		// The snapshot's object, from memory, imported by the engine as a checkpoint and a
		// sandbox claimed from it: the engine's part of a restore alone.
		snap, err := e.d.Store.SnapshotByID(ctx, snapID)
		if err != nil {
			b.Fatal(err)
		}
		var object bytes.Buffer
		if err := readObject(ctx, e.d.Blobs, snap.ObjectKey, &object); err != nil {
			b.Fatal(err)
		}
		key := sandbox.PoolKey{Template: "base", Size: sandbox.SizeSmall} // the bench box's, as newBoxBench makes it
		layers := []sandbox.DiskExport{{SHA256: snap.SHA256, Bytes: snap.Bytes}}
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			ck, err := e.eng.ImportCheckpointDisk(ctx, bytes.NewReader(object.Bytes()), layers, key, "")
			if err != nil {
				b.Fatal(err)
			}
			imported = append(imported, time.Since(start))
			got, err := e.eng.ClaimFromCheckpoint(ctx, ck.ID, time.Minute, "")
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if err := e.eng.Release(ctx, sandbox.SandboxRef{ID: got.ID, Token: got.Token}); err != nil {
				b.Fatal(err)
			}
			if err := e.eng.DeleteCheckpoint(ctx, ck.ID); err != nil {
				b.Fatal(err)
			}
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("RawEngineImport", func(b *testing.B) {
		// The import alone, timed in RawEngineRestore: the rest of that is the claim, which
		// copies the checkpoint's disk into the new sandbox (the checkpoint stays claimable).
		if len(imported) == 0 {
			b.Skip("taken in RawEngineRestore, which did not run")
		}
		benchreport.Throughput(b, size, imported)
	})
	b.Run("RawEngineImportClaim", func(b *testing.B) {
		// The snapshot's object, from memory, unpacked by the engine straight into a sandbox
		// claimed for it: what a restore asks of the engine since it has import_claim.
		snap, err := e.d.Store.SnapshotByID(ctx, snapID)
		if err != nil {
			b.Fatal(err)
		}
		var object bytes.Buffer
		if err := readObject(ctx, e.d.Blobs, snap.ObjectKey, &object); err != nil {
			b.Fatal(err)
		}
		key := sandbox.PoolKey{Template: "base", Size: sandbox.SizeSmall}
		layers := []sandbox.DiskExport{{SHA256: snap.SHA256, Bytes: snap.Bytes}}
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			got, err := e.eng.ImportClaim(ctx, bytes.NewReader(object.Bytes()), layers, key, time.Minute, "")
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if err := e.eng.Release(ctx, got.SandboxRef); err != nil {
				b.Fatal(err)
			}
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("RawEngineExport", func(b *testing.B) {
		st, err := e.d.Boxes.Get(ctx, e.owner, id)
		if err != nil {
			b.Fatal(err)
		}
		row, err := e.eng.Get(ctx, st.SandboxID)
		if err != nil {
			b.Fatal(err)
		}
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			ck, err := e.eng.Checkpoint(ctx, sandbox.SandboxRef{ID: row.ID, Token: row.Token}, "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.eng.ExportCheckpointDisk(ctx, ck.ID, nil, io.Discard); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
			if err := e.eng.DeleteCheckpoint(ctx, ck.ID); err != nil {
				b.Fatal(err)
			}
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("RawS3Upload", func(b *testing.B) {
		// An object of the snapshot's size, from memory, as the upload sends it: the S3 part of
		// the snapshot's path alone. Its rate is over the state's size, like the others.
		benchreport.Throughput(b, size, rawUploads(ctx, b, e.d.Blobs, objectBytes))
	})
	b.Run("RawTarZstd", func(b *testing.B) {
		dir := disk()
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			cmd := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -cf - . | zstd -3 -T0 -q > /dev/null`, "sh", dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("tar | zstd: %v: %s", err, out)
			}
			samples = append(samples, time.Since(start))
		}
		benchreport.Throughput(b, size, samples)
	})
	b.Run("BoxAfter10MiB", func(b *testing.B) {
		// Last, as it grows the state. The default retention, as a user's seals run:
		// incremental snapshots, an occasional compaction among them.
		p.KeepSnapshots = workflows.DefaultKeepSnapshots
		if _, err := e.d.Boxes.SetPolicy(ctx, e.owner, id, p); err != nil {
			b.Fatal(err)
		}
		st, err := e.d.Boxes.Get(ctx, e.owner, id)
		if err != nil {
			b.Fatal(err)
		}
		row, err := e.eng.Get(ctx, st.SandboxID)
		if err != nil {
			b.Fatal(err)
		}
		ref := sandbox.SandboxRef{ID: row.ID, Token: row.Token}
		var samples []time.Duration
		var objects []float64
		n := 0
		for b.Loop() {
			n++
			res, err := e.eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c",
				"head -c 10M /dev/urandom > /root/state/change" + strconv.Itoa(n)}, TimeoutSeconds: 60})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("write 10 MiB: %+v, %v", res, err)
			}
			start := time.Now()
			r, err := e.d.Boxes.Snapshot(ctx, e.owner, id)
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			objects = append(objects, float64(r.Snapshot.Bytes)/(1<<20))
		}
		benchreport.Latency(b, samples)
		slices.Sort(objects)
		b.ReportMetric(objects[len(objects)/2], "object-MiB")
	})
	b.Run("RawS3Upload10MiB", func(b *testing.B) {
		benchreport.Latency(b, rawUploads(ctx, b, e.d.Blobs, 10<<20))
	})
}

// rawUploads times b.N multipart uploads of n random bytes from memory to the bucket.
func rawUploads(ctx context.Context, b *testing.B, blobs objstore.Store, n int64) []time.Duration {
	b.Helper()
	data := make([]byte, n)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := blobs.Upload(ctx, "bench/raw-upload", bytes.NewReader(data), objstore.UploadOptions{}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	_ = blobs.Delete(ctx, "bench/raw-upload")
	return samples
}

// readObject copies the object at key into w.
func readObject(ctx context.Context, blobs objstore.Store, key string, w io.Writer) error {
	r, err := blobs.Get(ctx, key)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	_, err = io.Copy(w, r)
	return err
}

// dropSnapshots removes every snapshot of box id, objects then rows, newest first (what is built
// on a base goes before it), as a purge does.
func dropSnapshots(ctx context.Context, b *testing.B, st *store.Store, blobs objstore.Store, id cocoonbox.BoxID) {
	b.Helper()
	snaps, err := st.ListSnapshots(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range snaps {
		for _, key := range []string{s.ObjectKey, s.IndexKey, activities.SnapshotManifestKey(id, s.ID)} {
			if key != "" {
				if err := blobs.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
					b.Fatal(err)
				}
			}
		}
		if err := st.DeleteSnapshot(ctx, s.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// treeBytes is the apparent size of everything under dir (du --apparent-size).
func treeBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var out bytes.Buffer
	cmd := exec.Command("du", "-sb", dir)
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.Fields(out.String())[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
