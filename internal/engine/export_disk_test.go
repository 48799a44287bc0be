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

	other := sandbox.NewHTTP(h.srv.URL, tenantB, h.srv.Client())
	if _, err := other.ExportCheckpointDisk(ctx, ck.ID, &bytes.Buffer{}); sandbox.StatusCode(err) != 404 {
		t.Fatalf("another tenant's export: %v, want 404", err)
	}
}
