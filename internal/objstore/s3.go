package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
)

var _ Store = (*S3)(nil)

// S3 is a Store on one S3 bucket.
type S3 struct {
	client *s3.Client
	// transfer runs Upload's multipart loop; see upload.go.
	transfer *transfermanager.Client
	presign  *s3.PresignClient
	bucket   string
	region   string
	// plainHTTP endpoints cannot take a streamed body signed the normal way;
	// see Put.
	plainHTTP bool
}

// NewS3 validates cfg and builds a client for its bucket; it makes no
// request. httpClient carries the S3 calls, and with them the timeouts and
// TLS roots (AWS_CA_BUNDLE does not apply to it); give it connection and
// header timeouts but no overall Client.Timeout, since a snapshot transfer may
// take many minutes: bound calls with ctx instead. Never pass
// http.DefaultClient, which has no timeouts at all. nil gets such a client
// built by the SDK, which does honour AWS_CA_BUNDLE.
func NewS3(ctx context.Context, cfg Config, httpClient *http.Client) (*S3, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var loadOpts []func(*config.LoadOptions) error
	if httpClient == nil {
		loadOpts = append(loadOpts, config.WithHTTPClient(newHTTPClient()))
	}
	if cfg.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("%w: Region is required (or set AWS_REGION)", ErrInvalidConfig)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		// Set here, not in LoadDefaultConfig, which insists on a client it
		// can add AWS_CA_BUNDLE to; credential lookups keep the SDK's own.
		if httpClient != nil {
			o.HTTPClient = httpClient
		}
		if o.HTTPClient == nil {
			o.HTTPClient = newHTTPClient()
		}
		o.HTTPClient = unavailableClient{inner: o.HTTPClient}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Objects written without a checksum (multipart, older servers)
		// would otherwise log a warning on every read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	return &S3{
		client:    client,
		transfer:  transfermanager.New(unsignedParts(client)),
		presign:   s3.NewPresignClient(client),
		bucket:    cfg.Bucket,
		region:    awsCfg.Region,
		plainHTTP: isPlainHTTP(cfg.Endpoint),
	}, nil
}

// unsignedParts is client sending its bodies unsigned (unsignedBody), for Upload's parts. Over
// https the SDK does so already (the CRC32 goes in a trailer); over plain http, as to the
// embedded server, it hashed each part with sha256 to sign it, and the server hashed it again
// to check: two passes over every byte of a snapshot on the cores that compress it. A part's
// integrity rests on its CRC32 instead, in a header the server checks, and the object's on the
// composite CRC32 Upload compares and on the stream's sha256 a restore checks against the
// snapshot's row.
func unsignedParts(client *s3.Client) *s3.Client {
	return s3.New(client.Options(), func(o *s3.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), unsignedBody)
	})
}

// unsignedBody has a request's body go as UNSIGNED-PAYLOAD; the request itself is still signed.
// The payload hash is set as the request starts, before the checksum middleware, which computes
// a sha256 beside the CRC32 whenever none is set yet, and before the middleware that would hash
// the body to sign it (which the SDK's SwapComputePayloadSHA256ForUnsignedPayloadMiddleware
// replaces, leaving the checksum middleware's sha256 in place).
func unsignedBody(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("cocoonboxUnsignedPayload",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
			middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(v4.SetPayloadHash(ctx, unsignedPayload), in)
		}), middleware.Before)
}

// unsignedPayload is what a request's X-Amz-Content-Sha256 says when its body is not signed.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// newHTTPClient bounds every phase that can hang on a dead peer and leaves the
// body transfer to the caller's context.
func newHTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 10 * time.Second }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.TLSHandshakeTimeout = 10 * time.Second
			tr.ResponseHeaderTimeout = time.Minute
		})
}

// Put uploads r in a single PutObject; size must be exact. A body that cannot
// seek cannot be hashed before sending, and over https the SDK then sends a
// trailing checksum instead; over plain http (the dev server on loopback)
// that is not allowed, so such bodies go as UNSIGNED-PAYLOAD without a
// checksum, and snapshot integrity rests on the manifest's sha256.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("put object: %w", err)
	}
	if size < 0 {
		return fmt.Errorf("put object %q: size %d is negative", key, size)
	}
	var optFns []func(*s3.Options)
	if _, seekable := r.(io.Seeker); !seekable && s.plainHTTP {
		optFns = append(optFns,
			s3.WithAPIOptions(unsignedBody),
			func(o *s3.Options) { o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired },
		)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          r,
		ContentLength: aws.Int64(size),
	}, optFns...)
	if err != nil {
		return objectError("put", key, err)
	}
	return nil
}

// Get streams the object at key.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get object: %w", err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return nil, objectError("get", key, err)
	}
	return checkedBody{ReadCloser: out.Body, key: key}, nil
}

// Stat describes the object at key.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, fmt.Errorf("stat object: %w", err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return Info{}, objectError("stat", key, err)
	}
	return Info{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         trimETag(aws.ToString(out.ETag)),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Delete removes the object at key if it exists.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("delete object: %w", err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	// S3 answers 204 for a missing key; some compatible servers say NoSuchKey.
	if err != nil && !isNotFound(err) {
		return objectError("delete", key, err)
	}
	return nil
}

// Check confirms the bucket exists and the credentials may use it.
func (s *S3) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err != nil {
		if isNoBucket(err) {
			return fmt.Errorf("check bucket %q: %w", s.bucket, errNoBucket)
		}
		return fmt.Errorf("check bucket %q: %w", s.bucket, err)
	}
	return nil
}

// EnsureBucket creates the bucket unless it already exists and is ours; for
// the embedded dev server and first-time setup.
func (s *S3) EnsureBucket(ctx context.Context) error {
	err := s.Check(ctx)
	if !errors.Is(err, errNoBucket) {
		return err
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(s.bucket)}
	// us-east-1 is the one region that rejects its own name as a constraint.
	if s.region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.region),
		}
	}
	// Owned-by-you covers a concurrent EnsureBucket winning the race.
	if _, err := s.client.CreateBucket(ctx, in); err != nil && !isBucketOwned(err) {
		return fmt.Errorf("create bucket %q: %w", s.bucket, err)
	}
	return nil
}

// isPlainHTTP reports an endpoint without TLS; validate has already parsed it.
func isPlainHTTP(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && u.Scheme == "http"
}

// checkKey rejects keys S3 would refuse or that would alias another object.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("key is empty")
	case len(key) > 1024:
		return fmt.Errorf("key %.40q...: longer than 1024 bytes", key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("key %q: must not start with a slash", key)
	}
	return nil
}
