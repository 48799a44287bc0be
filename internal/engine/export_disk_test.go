package engine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// TestExportCheckpointDisk: a checkpoint's disk streams out in the snapshot format with its
// checksum in trailers, and imports back into the same files; other tenants see not found.
func TestExportCheckpointDisk(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.exec(sb, "write", "/root/notes", "exported")
	ck := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	if !h.info().Capabilities.DiskExport {
		t.Fatal("info does not announce disk export")
	}

	ctx := context.Background()
	client := sandbox.NewHTTP(h.srv.URL, tenantA, h.srv.Client())
	var stream bytes.Buffer
	got, err := client.ExportCheckpointDisk(ctx, ck.ID, &stream)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bytes != int64(stream.Len()) || got.SHA256 == "" || got.Files == 0 {
		t.Fatalf("export reported %+v for %d bytes", got, stream.Len())
	}
	root := filepath.Join(t.TempDir(), "restored")
	if _, err := snapshot.Import(ctx, &stream, root, snapshot.Manifest{SHA256: got.SHA256, Bytes: got.Bytes}); err != nil {
		t.Fatalf("import the exported stream: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "root", "notes"))
	if err != nil || string(data) != "exported" {
		t.Fatalf("restored /root/notes = %q, %v", data, err)
	}

	// The same stream, imported as a new checkpoint, gives a box with that disk.
	var again bytes.Buffer
	if _, err := client.ExportCheckpointDisk(ctx, ck.ID, &again); err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(again.Bytes())
	corrupt[len(corrupt)/2] ^= 0xff
	before := len(decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints)
	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	if _, err := client.ImportCheckpointDisk(ctx, bytes.NewReader(corrupt), got, key, ""); sandbox.StatusCode(err) != 400 {
		t.Fatalf("import of a corrupted stream: %v, want 400", err)
	}
	if n := len(decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints); n != before {
		t.Fatalf("a refused import left a checkpoint: %d, want %d", n, before)
	}
	imported, err := client.ImportCheckpointDisk(ctx, &again, got, key, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if imported.Key != key || imported.Name != "restored" || imported.SandboxID != "" {
		t.Fatalf("imported checkpoint %+v", imported)
	}
	branch, err := client.ClaimFromCheckpoint(ctx, imported.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", "/root/notes"}})
	if err != nil || res.Stdout != "exported" {
		t.Fatalf("box from the imported checkpoint sees %+v, %v", res, err)
	}

	other := sandbox.NewHTTP(h.srv.URL, tenantB, h.srv.Client())
	if _, err := other.ExportCheckpointDisk(ctx, ck.ID, &bytes.Buffer{}); sandbox.StatusCode(err) != 404 {
		t.Fatalf("another tenant's export: %v, want 404", err)
	}
}
