package objstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// maxPresignTTL is the longest validity SigV4 allows a presigned URL.
const maxPresignTTL = 7 * 24 * time.Hour

// PresignGet returns a URL that fetches key with a plain, credential-free
// GET for ttl (at least a second, at most 7 days), so a restore can stream
// a snapshot straight into a box without the worker relaying the bytes. It
// makes no request: the key's existence is checked only when the URL is
// used. Anyone holding the URL can read the object until it expires.
func (s *S3) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("presign get: %w", err)
	}
	// X-Amz-Expires is whole seconds; a shorter ttl would round to 0, which
	// servers read as invalid or as "already expired".
	if ttl < time.Second || ttl > maxPresignTTL {
		return "", fmt.Errorf("presign get %q: ttl %v must be between 1s and %v", key, ttl, maxPresignTTL)
	}
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign get %q: %w", key, err)
	}
	return req.URL, nil
}

// trimETag drops the quotes S3 puts around ETags, which are syntax, not value.
func trimETag(etag string) string {
	return strings.Trim(etag, `"`)
}
