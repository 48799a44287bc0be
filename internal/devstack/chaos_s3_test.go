package devstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// s3Outage (make chaos: TestChaos with -chaos-full) keeps the snapshot store down through a
// snapshot's every retry, where TestSnapshotWithS3Down brings it back within them: the snapshot
// must end on its own as failed, naming S3 in the box's one-line last error, with the box
// running and its file intact; once S3 is back the next snapshot completes and no multipart
// upload is left. It takes the retry policy's whole window (about three minutes), hence make
// chaos, and returns how long the snapshot took to fail.
func (c *chaosBox) s3Outage(ctx context.Context, t *testing.T) time.Duration {
	before := c.complete(ctx, t)
	if err := devstack.StopS3(c.d); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() { _, _ = c.d.Boxes.Snapshot(ctx, c.owner, c.id) }() // it answers at its deadline; the workflow goes on
	uploading := func() (bool, string) {
		rows, err := c.d.Store.ListSnapshots(ctx, c.id)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			if r.State == cocoonbox.SnapshotUploading {
				return true, "uploading"
			}
		}
		return false, "none uploading"
	}
	// Its row is written (PostgreSQL is up) before the upload meets S3: wait for it, so an
	// earlier cell's last error cannot pass for this snapshot's.
	testutil.EventuallyReports(t, testutil.WaitLong, "the snapshot to begin", uploading)
	var seen string
	testutil.Eventually(t, 8*time.Minute, "the snapshot to fail on its own with S3 still down", func() bool {
		if busy, what := uploading(); busy || what != "none uploading" {
			seen = what
			return false
		}
		st, err := c.d.Boxes.Get(ctx, c.owner, c.id)
		seen = fmt.Sprintf("%s %q %v", st.State, st.LastError, err)
		return err == nil && st.State == cocoonbox.BoxStateRunning && strings.Contains(st.LastError, "S3")
	}, &seen)
	took := time.Since(start)
	st, err := c.d.Boxes.Get(ctx, c.owner, c.id)
	if err != nil {
		t.Fatal(err)
	}
	s3Host := strings.TrimPrefix(c.d.URLs().S3, "http://")
	if !strings.Contains(st.LastError, "S3 at "+s3Host) || strings.Contains(st.LastError, "\n") || len(st.LastError) > 300 {
		t.Errorf("last error %q: want one line naming S3 at %s", st.LastError, s3Host)
	}
	if got := c.complete(ctx, t); got != before {
		t.Errorf("complete snapshots %d → %d while S3 was down", before, got)
	}
	if out, err := c.exec(ctx, "sha256sum /root/data"); err != nil || !strings.HasPrefix(out, c.sum) {
		t.Errorf("file after the failed snapshot: %q, %v", out, err)
	}
	if err := devstack.StartS3(ctx, c.d); err != nil {
		t.Fatal(err)
	}
	if _, err := c.d.Boxes.Snapshot(ctx, c.owner, c.id); err != nil {
		t.Fatalf("snapshot once S3 is back: %v", err)
	}
	if left, err := c.d.Blobs.ListIncomplete(ctx, "boxes/"); err != nil || len(left) != 0 {
		t.Errorf("multipart uploads left: %v, %v", left, err)
	}
	t.Logf("with S3 down the snapshot failed on its own after %s: %q", took.Round(time.Second), st.LastError)
	return took
}

// outageVerdict is the matrix's result for the S3 outage.
func outageVerdict(held bool, took time.Duration) string {
	if !held {
		return "FAILED"
	}
	return fmt.Sprintf("held (failed on its own after %s, naming S3; the next snapshot complete)", took.Round(time.Second))
}
