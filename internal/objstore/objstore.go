// Package objstore is where snapshot blobs live: a small Store interface the
// snapshot activities program against, and its S3 implementation, which
// serves AWS S3, any S3-compatible service, and the embedded dev server
// (internal/s3server) alike.
//
// It must stay light: the worker imports it, so it never imports versitygw.
package objstore

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Store is where snapshot blobs live. Keys are opaque slash-separated names
// inside one bucket.
type Store interface {
	// Put writes size bytes from r under key, replacing any object there.
	// The object is visible only once it is complete.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get streams the object; the caller closes it. ErrNotFound when missing. A body whose
	// bytes fail the checksum stored with the object fails its last Read with ErrCorrupt.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object without reading it. ErrNotFound when missing.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object; a missing object is not an error, so a
	// failed delete can simply be retried.
	Delete(ctx context.Context, key string) error
	// Check reports whether the bucket is reachable with these credentials,
	// for health checks and fail-fast startup.
	Check(ctx context.Context) error

	// Upload streams r, of unknown length, to key as a multipart upload and
	// reports progress per part. On any failure the upload is aborted, so
	// no parts are left behind.
	Upload(ctx context.Context, key string, r io.Reader, opts UploadOptions) (UploadResult, error)
	// AbortIncomplete aborts the unfinished multipart uploads under prefix
	// started more than olderThan ago (0: all of them) and says how many.
	AbortIncomplete(ctx context.Context, prefix string, olderThan time.Duration) (int, error)
	// ListIncomplete lists the keys of unfinished multipart uploads under
	// prefix, one entry per upload.
	ListIncomplete(ctx context.Context, prefix string) ([]string, error)
	// PresignGet returns a URL that fetches key with a plain GET until ttl
	// has passed, without credentials.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// Info describes a stored object.
type Info struct {
	// Key is the object's key.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ETag is the server's opaque version tag, without quotes. It is not a
	// content hash for multipart objects; snapshot manifests carry their own.
	ETag string
	// LastModified is when the object was last written.
	LastModified time.Time
}

// RecordingKey is where chunk seq of a run's desktop recording lives in the bucket: written by
// the worker's recorder, read by the API's replay.
func RecordingKey(runID string, seq int) string {
	return fmt.Sprintf("recordings/%s/%06d.gz", runID, seq)
}
