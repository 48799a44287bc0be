package engine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	got, err := client.ExportCheckpointDisk(ctx, ck.ID, nil, &stream)
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
	if _, err := client.ExportCheckpointDisk(ctx, ck.ID, nil, &again); err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(again.Bytes())
	corrupt[len(corrupt)/2] ^= 0xff
	before := len(decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints)
	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	if _, err := client.ImportCheckpointDisk(ctx, bytes.NewReader(corrupt), []sandbox.DiskExport{got}, key, ""); sandbox.StatusCode(err) != 400 {
		t.Fatalf("import of a corrupted stream: %v, want 400", err)
	}
	if n := len(decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints); n != before {
		t.Fatalf("a refused import left a checkpoint: %d, want %d", n, before)
	}
	imported, err := client.ImportCheckpointDisk(ctx, &again, []sandbox.DiskExport{got}, key, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if imported.Key != key || imported.Name != "restored" || imported.SandboxID != "" {
		t.Fatalf("imported checkpoint %+v", imported)
	}
	if _, err := client.ClaimFromCheckpoint(ctx, imported.ID, 0, strings.Repeat("r", 257)); sandbox.StatusCode(err) != 400 {
		t.Fatalf("a claim_ref over 256 bytes: %v, want 400", err)
	}
	branch, err := client.ClaimFromCheckpoint(ctx, imported.ID, 0, "bx_0123456789abcdef/7")
	if err != nil {
		t.Fatal(err)
	}
	// A client whose answer was lost finds the sandbox by its claim_ref, as after a Claim.
	if rows, err := client.List(ctx, "bx_0123456789abcdef/7"); err != nil || len(rows) != 1 || rows[0].ID != branch.ID {
		t.Fatalf("sandboxes under the checkpoint claim's claim_ref: %+v, %v; want %s", rows, err, branch.ID)
	}
	res, err := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", "/root/notes"}})
	if err != nil || res.Stdout != "exported" {
		t.Fatalf("box from the imported checkpoint sees %+v, %v", res, err)
	}

	other := sandbox.NewHTTP(h.srv.URL, tenantB, h.srv.Client())
	if _, err := other.ExportCheckpointDisk(ctx, ck.ID, nil, &bytes.Buffer{}); sandbox.StatusCode(err) != 404 {
		t.Fatalf("another tenant's export: %v, want 404", err)
	}
}

// TestIncrementalCheckpointDisk: a checkpoint's disk exported against the index of an earlier
// export holds only what changed, and the two streams imported as a chain give a box with the
// later disk; a bad base index, a chain whose sizes do not add up, and an index asked for before
// any export are refused.
func TestIncrementalCheckpointDisk(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.exec(sb, "write", "/root/kept", "the same")
	h.exec(sb, "write", "/root/gone", "deleted later")
	checkpoint := func() sandbox.Checkpoint {
		return decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
			sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	}
	ctx := context.Background()
	client := sandbox.NewHTTP(h.srv.URL, tenantA, h.srv.Client())
	if !h.info().Capabilities.IncrementalDisk {
		t.Fatal("info does not announce incremental disk export")
	}
	first := checkpoint()
	if _, err := client.CheckpointDiskIndex(ctx, first.ID, &bytes.Buffer{}); sandbox.StatusCode(err) != 409 {
		t.Fatalf("index before an export: %v, want 409", err)
	}
	var full, index bytes.Buffer
	fullSum, err := client.ExportCheckpointDisk(ctx, first.ID, nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CheckpointDiskIndex(ctx, first.ID, &index); err != nil {
		t.Fatal(err)
	}

	h.exec(sb, "write", "/root/new", "added")
	h.exec(sb, "rm", "/root/gone")
	second := checkpoint()
	var delta bytes.Buffer
	deltaSum, err := client.ExportCheckpointDisk(ctx, second.ID, bytes.NewReader(index.Bytes()), &delta)
	if err != nil {
		t.Fatal(err)
	}
	if deltaSum.Deleted != 1 || deltaSum.Files >= fullSum.Files {
		t.Fatalf("incremental export %+v against a full one of %+v: want 1 deletion and fewer entries", deltaSum, fullSum)
	}
	if _, err := client.ExportCheckpointDisk(ctx, second.ID, bytes.NewReader([]byte("not an index")), &bytes.Buffer{}); sandbox.StatusCode(err) != 400 {
		t.Fatalf("export against junk: %v, want 400", err)
	}

	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	chain := append(bytes.Clone(full.Bytes()), delta.Bytes()...)
	short := []sandbox.DiskExport{fullSum, {SHA256: deltaSum.SHA256, Bytes: deltaSum.Bytes - 1}}
	if _, err := client.ImportCheckpointDisk(ctx, bytes.NewReader(chain), short, key, ""); sandbox.StatusCode(err) != 400 {
		t.Fatalf("import of a chain whose sizes are off: %v, want 400", err)
	}
	imported, err := client.ImportCheckpointDisk(ctx, bytes.NewReader(chain), []sandbox.DiskExport{fullSum, deltaSum}, key, "")
	if err != nil {
		t.Fatal(err)
	}
	branch, err := client.ClaimFromCheckpoint(ctx, imported.ID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"/root/kept": "the same", "/root/new": "added"} {
		res, err := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", file}})
		if err != nil || res.Stdout != want {
			t.Errorf("%s in the box from the chain: %+v, %v; want %q", file, res, err, want)
		}
	}
	if res, _ := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", "/root/gone"}}); res.ExitCode == 0 {
		t.Errorf("/root/gone came back from the chain: %+v", res)
	}
}

// TestCheckpointSince: a checkpoint of what changed since an earlier export's index holds only
// that, its export against the index is the incremental stream, which imported over the earlier
// export gives a box with the later disk; it cannot be claimed nor exported whole or against
// another index, and a junk index or a missing or wrong sandbox token is refused.
func TestCheckpointSince(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.exec(sb, "write", "/root/kept", "the same")
	h.exec(sb, "write", "/root/gone", "deleted later")
	ctx := context.Background()
	client := sandbox.NewHTTP(h.srv.URL, tenantA, h.srv.Client())
	if !h.info().Capabilities.CheckpointSince {
		t.Fatal("info does not announce checkpoints since an export")
	}
	first := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	var full, index bytes.Buffer
	fullSum, err := client.ExportCheckpointDisk(ctx, first.ID, nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CheckpointDiskIndex(ctx, first.ID, &index); err != nil {
		t.Fatal(err)
	}

	h.exec(sb, "write", "/root/new", "added")
	h.exec(sb, "rm", "/root/gone")
	base := func() *bytes.Reader { return bytes.NewReader(index.Bytes()) }
	if _, err := client.CheckpointSince(ctx, sandbox.SandboxRef{ID: sb.ID, Token: sb.Token}, "", bytes.NewReader([]byte("junk"))); sandbox.StatusCode(err) != 400 {
		t.Errorf("a checkpoint since a junk index: %v, want 400", err)
	}
	if _, err := client.CheckpointSince(ctx, sandbox.SandboxRef{ID: sb.ID}, "", base()); sandbox.StatusCode(err) != 400 {
		t.Errorf("a checkpoint since without the sandbox token: %v, want 400", err)
	}
	if _, err := client.CheckpointSince(ctx, sandbox.SandboxRef{ID: sb.ID, Token: "0123456789abcdef0123456789abcdef"}, "", base()); sandbox.StatusCode(err) != 404 {
		t.Errorf("a checkpoint since with a wrong sandbox token: %v, want 404", err)
	}
	since, err := client.CheckpointSince(ctx, sandbox.SandboxRef{ID: sb.ID, Token: sb.Token}, "snap-2", base())
	if err != nil {
		t.Fatal(err)
	}
	if since.Name != "snap-2" || since.SandboxID != sb.ID {
		t.Errorf("checkpoint since: %+v", since)
	}
	if _, err := client.ExportCheckpointDisk(ctx, since.ID, nil, &bytes.Buffer{}); sandbox.StatusCode(err) != 409 {
		t.Errorf("a whole export of a checkpoint since: %v, want 409", err)
	}
	var other bytes.Buffer
	if err := snapshot.WriteIndex(&other, &snapshot.Index{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ExportCheckpointDisk(ctx, since.ID, &other, &bytes.Buffer{}); sandbox.StatusCode(err) != 409 {
		t.Errorf("an export of a checkpoint since against another index: %v, want 409", err)
	}
	if _, err := client.ClaimFromCheckpoint(ctx, since.ID, 0, ""); sandbox.StatusCode(err) != 409 {
		t.Errorf("a claim from a checkpoint since: %v, want 409", err)
	}
	var delta bytes.Buffer
	deltaSum, err := client.ExportCheckpointDisk(ctx, since.ID, base(), &delta)
	if err != nil {
		t.Fatal(err)
	}
	if deltaSum.Deleted != 1 || deltaSum.Files >= fullSum.Files {
		t.Fatalf("export %+v of a checkpoint since a full one of %+v: want 1 deletion and fewer entries", deltaSum, fullSum)
	}
	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	chain := append(bytes.Clone(full.Bytes()), delta.Bytes()...)
	imported, err := client.ImportCheckpointDisk(ctx, bytes.NewReader(chain), []sandbox.DiskExport{fullSum, deltaSum}, key, "")
	if err != nil {
		t.Fatal(err)
	}
	branch, err := client.ClaimFromCheckpoint(ctx, imported.ID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"/root/kept": "the same", "/root/new": "added"} {
		res, err := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", file}})
		if err != nil || res.Stdout != want {
			t.Errorf("%s in the box from the chain: %+v, %v; want %q", file, res, err, want)
		}
	}
	if res, _ := client.Exec(ctx, branch.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", "/root/gone"}}); res.ExitCode == 0 {
		t.Errorf("/root/gone came back from the chain: %+v", res)
	}
}

// TestImportClaim: a disk chain imported with a claim is a running sandbox with that disk,
// tagged with its claim_ref, and no checkpoint is left; a chain whose checksum is off, or a bad
// lease, is refused and leaves no sandbox.
func TestImportClaim(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.exec(sb, "write", "/root/kept", "the same")
	h.exec(sb, "write", "/root/gone", "deleted later")
	ctx := context.Background()
	client := sandbox.NewHTTP(h.srv.URL, tenantA, h.srv.Client())
	root := sandbox.NewHTTP(h.srv.URL, rootToken, h.srv.Client()) // adopts: it reads tokens
	if !h.info().Capabilities.ImportClaim {
		t.Fatal("info does not announce claims from an imported disk")
	}
	checkpoint := func() sandbox.Checkpoint {
		return decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
			sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	}
	var full, index, delta bytes.Buffer
	fullSum, err := client.ExportCheckpointDisk(ctx, checkpoint().ID, nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := client.ListCheckpoints(ctx)
	if _, err := client.CheckpointDiskIndex(ctx, first[0].ID, &index); err != nil {
		t.Fatal(err)
	}
	h.exec(sb, "write", "/root/new", "added")
	h.exec(sb, "rm", "/root/gone")
	deltaSum, err := client.ExportCheckpointDisk(ctx, checkpoint().ID, bytes.NewReader(index.Bytes()), &delta)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := client.ListCheckpoints(ctx)
	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	chain := func() *bytes.Reader { return bytes.NewReader(append(bytes.Clone(full.Bytes()), delta.Bytes()...)) }

	bad := []sandbox.DiskExport{fullSum, {SHA256: strings.Repeat("0", 64), Bytes: deltaSum.Bytes}}
	if _, err := client.ImportClaim(ctx, chain(), bad, key, 0, "restore-bad"); sandbox.StatusCode(err) != 400 {
		t.Errorf("a claim from a chain whose checksum is off: %v, want 400", err)
	}
	if _, ok, err := root.Adopt(ctx, "", "restore-bad"); err != nil || ok {
		t.Errorf("a refused import left a sandbox: %v, %v", ok, err)
	}
	h.must(400, "POST", "/v1/sandboxes/import?template=base&ttl_seconds=soon", tenantA, nil)

	got, err := client.ImportClaim(ctx, chain(), []sandbox.DiskExport{fullSum, deltaSum}, key, time.Hour, "restore-1")
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"/root/kept": "the same", "/root/new": "added"} {
		res, err := client.Exec(ctx, got.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", file}})
		if err != nil || res.Stdout != want {
			t.Errorf("%s in the box from the import: %+v, %v; want %q", file, res, err, want)
		}
	}
	if res, _ := client.Exec(ctx, got.SandboxRef, sandbox.ExecRequest{Argv: []string{"cat", "/root/gone"}}); res.ExitCode == 0 {
		t.Errorf("/root/gone came back from the import: %+v", res)
	}
	if adopted, ok, err := root.Adopt(ctx, "", "restore-1"); err != nil || !ok || adopted.ID != got.ID {
		t.Errorf("the sandbox is not found by its claim_ref: %+v %v %v", adopted, ok, err)
	}
	if after, _ := client.ListCheckpoints(ctx); len(after) != len(before) {
		t.Errorf("the import left %d checkpoints, %d before it", len(after), len(before))
	}
}
