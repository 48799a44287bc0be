package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

const (
	// MinPartSize is the smallest part S3 accepts (except the last one).
	MinPartSize = 5 << 20
	// DefaultPartSize balances request count against memory: Upload holds
	// about Concurrency+2 parts in memory at once.
	DefaultPartSize = 16 << 20
	// DefaultConcurrency keeps two parts in flight, enough to overlap
	// reading the stream with sending on the small nodes cocoonbox targets.
	DefaultConcurrency = 2
	// maxUploadParts is S3's limit; with DefaultPartSize it caps a stream at
	// 160 GiB.
	maxUploadParts = 10000
	// abortTimeout bounds the cleanup after a failed upload. It runs on a
	// fresh context because the usual cause of failure is the caller's
	// context being cancelled, and the abort must still reach the server.
	abortTimeout = 30 * time.Second
)

// UploadOptions tunes Upload. The zero value is usable.
type UploadOptions struct {
	// PartSize is the number of bytes per part, at least MinPartSize; 0
	// means DefaultPartSize. A stream shorter than one part is sent as a
	// single PutObject instead.
	PartSize int64
	// Concurrency is how many parts are sent at once; 0 means
	// DefaultConcurrency.
	Concurrency int
	// OnProgress, if set, receives the total bytes stored so far after each
	// part, never decreasing. Calls are serialised but come from the
	// uploading goroutines, so it must return quickly (record a heartbeat,
	// do not send one synchronously over a slow link).
	OnProgress func(bytes int64)
}

// UploadResult describes a completed Upload.
type UploadResult struct {
	// Key is the object's key.
	Key string
	// Size is the number of bytes read from the stream and stored.
	Size int64
	// ETag is the server's tag for the object, without quotes; for a
	// multipart object it is not a content hash.
	ETag string
	// UploadID identifies the multipart upload; empty when the stream fit
	// in one part and went as a single PutObject.
	UploadID string
	// Checked is true when the server reported the stored object's CRC32
	// and it equals the one computed here over the bytes sent: the server
	// holds exactly what was read from the stream. False when the server
	// reports none; a mismatch fails the upload with ErrCorrupt instead.
	Checked bool
}

// resolve fills defaults and rejects options S3 would refuse part-way
// through a long upload.
func (o UploadOptions) resolve() (UploadOptions, error) {
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	switch {
	case o.PartSize < MinPartSize:
		return o, fmt.Errorf("part size %d is below the S3 minimum %d", o.PartSize, MinPartSize)
	case o.PartSize > 5<<30:
		return o, fmt.Errorf("part size %d is above the S3 maximum 5 GiB", o.PartSize)
	case o.Concurrency < 0:
		return o, fmt.Errorf("concurrency %d is negative", o.Concurrency)
	}
	return o, nil
}

// Upload streams r to key without knowing its length: a tar | zstd pipe.
//
// It uses the SDK's transfermanager, which reads the stream into part-sized
// buffers and sends each as an UploadPart from a bytes.Reader, its body
// unsigned (see unsignedParts) and its CRC32, computed before it is sent,
// in a header the server checks. A stream shorter than PartSize goes as one
// PutObject from the same kind of buffer.
//
// On any failure, including ctx being cancelled, the multipart upload is
// aborted on a fresh context, so no parts are left behind; if even that
// abort fails, the upload is left for AbortIncomplete. A cancelled ctx
// cannot interrupt a Read that is blocked on r: the caller should also
// close the pipe's reader side.
//
// The object becomes visible only when complete; it replaces any object at
// key. Its integrity rests on checksums, never the ETag: the CRC32 the
// server reports for what it stored is compared with the one computed here
// over the bytes read (UploadResult.Checked), and a mismatch fails the
// upload with ErrCorrupt.
func (s *S3) Upload(ctx context.Context, key string, r io.Reader, opts UploadOptions) (UploadResult, error) {
	if err := checkKey(key); err != nil {
		return UploadResult{}, fmt.Errorf("upload object: %w", err)
	}
	opts, err := opts.resolve()
	if err != nil {
		return UploadResult{}, fmt.Errorf("upload object %q: %w", key, err)
	}
	// countingReader also hides any io.Seeker r may have, so the transfer
	// manager always streams instead of sizing the body up front.
	body := &countingReader{r: r, sum: newPartCRC(opts.PartSize)}
	progress := &progressListener{fn: opts.OnProgress}
	out, err := s.transfer.UploadObject(ctx, &transfermanager.UploadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
		Body:   body,
	}, func(o *transfermanager.Options) {
		o.PartSizeBytes = opts.PartSize
		// Multipart as soon as the stream fills one part, so the first
		// read buffers one part, not the default 16 MiB threshold.
		o.MultipartUploadThreshold = opts.PartSize
		o.Concurrency = opts.Concurrency
		o.MaxUploadParts = maxUploadParts
		o.FailTimeout = abortTimeout
		o.ObjectProgressListeners.Register(progress)
	})
	if err != nil {
		// The transfer manager has already tried to abort; try once more
		// in case its attempt failed, since an orphaned upload keeps its
		// parts (and their storage) until someone aborts it.
		var mpu interface{ UploadID() string }
		if errors.As(err, &mpu) && mpu.UploadID() != "" {
			abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
			defer cancel()
			if abortErr := s.abortUpload(abortCtx, key, mpu.UploadID()); abortErr != nil {
				err = errors.Join(err, abortErr)
			}
		}
		return UploadResult{}, objectError("upload", key, err)
	}
	checked, err := body.sum.matches(aws.ToString(out.ChecksumCRC32), string(out.ChecksumType))
	if err != nil {
		return UploadResult{}, fmt.Errorf("upload object %q: %w: %v", key, ErrCorrupt, err)
	}
	return UploadResult{
		Key:      key,
		Size:     body.n,
		ETag:     trimETag(aws.ToString(out.ETag)),
		UploadID: aws.ToString(out.UploadID),
		Checked:  checked,
	}, nil
}

// AbortIncomplete aborts the multipart uploads under prefix that were
// started more than olderThan ago, or all of them when olderThan is 0, and
// returns how many it aborted. A retried snapshot activity calls it with its
// snapshot's key as prefix before uploading again, so the attempt that a
// killed worker left behind cannot leave orphaned parts, nor complete later
// and race the new attempt: its next UploadPart or Complete fails.
//
// Uploads whose start time the server does not report are aborted only when
// olderThan is 0, because they might be live. An empty prefix means the
// whole bucket.
func (s *S3) AbortIncomplete(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("abort incomplete uploads under %q: olderThan %v is negative", prefix, olderThan)
	}
	uploads, err := s.listUploads(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("abort incomplete uploads: %w", err)
	}
	cutoff := time.Now().Add(-olderThan)
	aborted := 0
	for _, u := range uploads {
		if olderThan > 0 && (u.Initiated == nil || !u.Initiated.Before(cutoff)) {
			continue
		}
		if err := s.abortUpload(ctx, aws.ToString(u.Key), aws.ToString(u.UploadId)); err != nil {
			return aborted, fmt.Errorf("abort incomplete uploads under %q: %w", prefix, err)
		}
		aborted++
	}
	return aborted, nil
}

// ListIncomplete returns the key of every unfinished multipart upload under
// prefix, once per upload, so a key being uploaded twice appears twice.
func (s *S3) ListIncomplete(ctx context.Context, prefix string) ([]string, error) {
	uploads, err := s.listUploads(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list incomplete uploads: %w", err)
	}
	keys := make([]string, 0, len(uploads))
	for _, u := range uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys, nil
}

// listUploads pages through ListMultipartUploads under prefix.
func (s *S3) listUploads(ctx context.Context, prefix string) ([]types.MultipartUpload, error) {
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	var all []types.MultipartUpload
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads under %q: %w", prefix, err)
		}
		all = append(all, out.Uploads...)
		if !aws.ToBool(out.IsTruncated) {
			return all, nil
		}
		// A server that says "more" without moving the markers would
		// otherwise loop forever.
		next := aws.ToString(out.NextKeyMarker)
		nextID := aws.ToString(out.NextUploadIdMarker)
		if next == aws.ToString(in.KeyMarker) && nextID == aws.ToString(in.UploadIdMarker) {
			return nil, fmt.Errorf("list multipart uploads under %q: truncated listing without a new marker", prefix)
		}
		in.KeyMarker, in.UploadIdMarker = aws.String(next), aws.String(nextID)
	}
}

// abortUpload aborts one multipart upload; one that is already gone
// (aborted by a concurrent cleanup, or completed) is not an error.
func (s *S3) abortUpload(ctx context.Context, key, uploadID string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.bucket),
		Key:      aws.String(key),
		UploadId: aws.String(uploadID),
	})
	if err != nil && !isNoSuchUpload(err) {
		return fmt.Errorf("abort multipart upload %q of %q: %w", uploadID, key, err)
	}
	return nil
}

// countingReader counts the bytes the transfer manager reads, which on
// success are exactly the bytes stored. Only one goroutine reads the body.
type countingReader struct {
	r   io.Reader
	n   int64
	sum *partCRC
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.sum.write(p[:n])
	return n, err
}

// progressListener adapts the transfer manager's per-part events to
// UploadOptions.OnProgress. Parts finish on several goroutines, possibly
// reporting their running totals out of order, so it serialises calls and
// drops totals below one already reported.
type progressListener struct {
	fn   func(int64)
	mu   sync.Mutex
	last int64
}

var _ transfermanager.ObjectBytesTransferredListener = (*progressListener)(nil)

// OnObjectBytesTransferred is called by the transfer manager after each part.
func (p *progressListener) OnObjectBytesTransferred(_ context.Context, ev *transfermanager.ObjectBytesTransferredEvent) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.BytesTransferred <= p.last {
		return
	}
	p.last = ev.BytesTransferred
	p.fn(ev.BytesTransferred)
}
