package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestChaosS3Outage (make chaos) keeps the snapshot store down through a snapshot's every retry,
// where TestSnapshotWithS3Down brings it back within them: the snapshot must end on its own as
// failed, naming S3 in the box's one-line last error, with the box running and its file intact;
// once S3 is back the next snapshot completes and no multipart upload is left. It takes the
// retry policy's whole window (about three minutes), hence make chaos.
func TestChaosS3Outage(t *testing.T) {
	if testing.Short() || !*chaosFull {
		t.Skip("make chaos: the retry window takes minutes")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 12*time.Minute)
	id := cocoonbox.NewBoxID()
	if st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "s3-outage", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create: %+v, %v", st, err)
	}
	c := &chaosBox{t: t, d: d, owner: owner.ID, id: id, eng: eng}
	sum, err := c.exec(ctx, "head -c 16777216 /dev/urandom > /root/data && sha256sum /root/data")
	if err != nil {
		t.Fatal(err)
	}
	sum = strings.Fields(sum)[0]

	if err := devstack.StopS3(d); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() { _, _ = d.Boxes.Snapshot(ctx, owner.ID, id) }() // it answers at its deadline; the workflow goes on
	var seen string
	testutil.Eventually(t, 8*time.Minute, "the snapshot to fail on its own with S3 still down", func() bool {
		rows, err := d.Store.ListSnapshots(ctx, id)
		if err != nil || len(rows) != 1 {
			seen = fmt.Sprintf("%v, %v", rows, err)
			return false
		}
		seen = string(rows[0].State)
		return rows[0].State == cocoonbox.SnapshotFailed
	}, &seen)
	took := time.Since(start)
	testutil.Eventually(t, testutil.WaitLong, "the box to be running with the failure as its last error", func() bool {
		st, err := d.Boxes.Get(ctx, owner.ID, id)
		seen = fmt.Sprintf("%s %q %v", st.State, st.LastError, err)
		return err == nil && st.State == cocoonbox.BoxStateRunning && st.LastError != ""
	}, &seen)
	st, err := d.Boxes.Get(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	s3Host := strings.TrimPrefix(d.URLs().S3, "http://")
	if !strings.Contains(st.LastError, "S3 at "+s3Host) || strings.Contains(st.LastError, "\n") || len(st.LastError) > 300 {
		t.Errorf("last error %q: want one line naming S3 at %s", st.LastError, s3Host)
	}
	if out, err := c.exec(ctx, "sha256sum /root/data"); err != nil || !strings.HasPrefix(out, sum) {
		t.Errorf("file after the failed snapshot: %q, %v", out, err)
	}

	if err := devstack.StartS3(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Boxes.Snapshot(ctx, owner.ID, id); err != nil {
		t.Fatalf("snapshot once S3 is back: %v", err)
	}
	if left, err := d.Blobs.ListIncomplete(ctx, "boxes/"); err != nil || len(left) != 0 {
		t.Errorf("multipart uploads left: %v, %v", left, err)
	}
	t.Logf("with S3 down the snapshot failed on its own after %s: %q", took.Round(time.Second), st.LastError)
	chaosRows = append(chaosRows, fmt.Sprintf("| snapshot | s3, down through every retry | the whole operation | %s (failed on its own after %s, naming S3; the next snapshot complete) |",
		verdict(t), took.Round(time.Second)))
}

func verdict(t *testing.T) string {
	if t.Failed() {
		return "FAILED"
	}
	return "held"
}
