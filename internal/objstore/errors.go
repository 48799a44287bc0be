package objstore

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/loomhand/cocoonbox"
)

// ErrNotFound means the object does not exist. Get reports a missing bucket
// as a plain error, a configuration problem rather than an absent snapshot;
// Stat cannot tell the two apart (a HEAD response has no body), which is what
// Check is for.
var ErrNotFound = errors.New("object not found")

// ErrCorrupt means an object's bytes no longer match the checksum the server stored with them:
// the SDK validates a GetObject body against it as the body is read, and the last Read reports
// the mismatch.
var ErrCorrupt = errors.New("object fails its stored checksum")

// ErrInvalidConfig marks a Config that cannot work, so callers can report it
// as the user's mistake rather than an outage.
var ErrInvalidConfig = errors.New("invalid objstore config")

// unavailableClient names the store in every failure to reach it, in one sentence a user can act
// on, with the domain code EUnavailable (so activities retry it and the API says unavailable);
// the transport's own error stays in the chain, where the SDK's retryer still recognizes it.
type unavailableClient struct {
	inner s3.HTTPClient
}

func (c unavailableClient) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.inner.Do(req)
	if err != nil && req.Context().Err() == nil {
		err = &cocoonbox.Error{Code: cocoonbox.EUnavailable,
			Message: fmt.Sprintf("snapshot store (S3 at %s) is not answering", req.URL.Host), Err: err}
	}
	return resp, err
}

// errNoBucket lets EnsureBucket tell "create it" from "cannot reach it".
var errNoBucket = errors.New("bucket does not exist")

// This file is the only one that names S3 error types.

// isNotFound reports whether err means the object is missing. GetObject says
// NoSuchKey; HeadObject has no body, so it can only say NotFound (404).
func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	return errors.As(err, &nsk) || errors.As(err, &nf)
}

// isBucketOwned reports whether CreateBucket failed only because the bucket
// already exists and belongs to us.
func isBucketOwned(err error) bool {
	var owned *types.BucketAlreadyOwnedByYou
	return errors.As(err, &owned)
}

// isNoBucket reports whether a bucket-level call failed because the bucket is
// missing. HeadBucket, like HeadObject, can only say NotFound.
func isNoBucket(err error) bool {
	var nsb *types.NoSuchBucket
	var nf *types.NotFound
	if errors.As(err, &nsb) || errors.As(err, &nf) {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchBucket"
}

// objectError wraps an S3 error for op on key, mapping a missing object to
// ErrNotFound so callers never see SDK types.
func objectError(op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s object %q: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("%s object %q: %w", op, key, err)
}

// isChecksumMismatch reports whether a body read failed the SDK's response checksum validation.
// Its error type is internal to the SDK, so only its text identifies it.
func isChecksumMismatch(err error) bool {
	return err != nil && strings.Contains(err.Error(), "checksum did not match")
}

// checkedBody gives a GetObject body's checksum failure the ErrCorrupt sentinel.
type checkedBody struct {
	io.ReadCloser
	key string
}

func (b checkedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && isChecksumMismatch(err) {
		err = fmt.Errorf("read object %q: %w: %v", b.key, ErrCorrupt, err)
	}
	return n, err
}

// isNoSuchUpload reports whether a multipart call failed because the upload
// is already gone: aborted by someone else, or completed.
func isNoSuchUpload(err error) bool {
	var nsu *types.NoSuchUpload
	if errors.As(err, &nsu) {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload"
}
