package devstack_test

import (
	"context"
	"testing"
)

// The mid-upload kill point of TestChaos (make chaos): a snapshot killed while its multipart
// upload is under way, parts sent and more to come.

// A mid-upload cell's snapshot carries midUploadBytes of new random data at midUploadMiBps:
// three 16 MiB parts over about 12 s, its multipart upload open from about 4 s (the first part
// read) to the end.
const (
	midUploadBytes = 48 << 20
	midUploadMiBps = 4
)

// capUploads gives the worker the mid-upload cells' upload cap, or takes it away, starting the
// worker again when that changes it.
func (c *chaosBox) capUploads(t *testing.T, on bool) {
	want := 0
	if on {
		want = midUploadMiBps
	}
	if c.wcfg.SnapshotUploadMiBps == want {
		return
	}
	c.wcfg.SnapshotUploadMiBps = want
	c.kill(t, "worker")
}

// uploading reports whether the box's snapshot upload is under way: its multipart upload is
// open in the bucket. The uploader opens it once the first part is read, so parts are being sent
// and, at the cap, the last one is seconds away.
func (c *chaosBox) uploading(ctx context.Context) bool {
	open, err := c.d.Blobs.ListIncomplete(ctx, "boxes/"+string(c.id)+"/")
	return err == nil && len(open) > 0
}
