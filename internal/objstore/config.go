package objstore

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Config says which bucket holds snapshots and how to reach it.
type Config struct {
	// Endpoint is the S3 base URL, such as http://127.0.0.1:8421; empty means
	// AWS S3 itself.
	Endpoint string
	// Region signs requests; empty takes the SDK's default chain
	// (AWS_REGION, shared config).
	Region string
	// Bucket holds the snapshot objects. Required.
	Bucket string
	// AccessKey and SecretKey are static credentials; leave both empty to
	// use the SDK's default chain (environment, shared files, instance role).
	AccessKey, SecretKey string
	// PathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint, as most self-hosted S3 servers require.
	PathStyle bool
}

// bucketName is the S3 naming rule (3-63 lower-case letters, digits, dots and
// hyphens, starting and ending alphanumeric), checked up front because the
// server's answer to a bad name is an unhelpful signature or DNS error.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// validate names the offending field in every problem, so a bad config file
// is fixed from the message alone.
func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.Bucket == "" {
		add("Bucket is required")
	} else if !bucketName.MatchString(c.Bucket) {
		add("Bucket %q must be 3-63 lower-case letters, digits, dots or hyphens", c.Bucket)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil:
			add("Endpoint %q is not a URL: %v", c.Endpoint, err)
		case u.Scheme != "http" && u.Scheme != "https":
			add("Endpoint %q must start with http:// or https://", c.Endpoint)
		case u.Host == "":
			add("Endpoint %q has no host", c.Endpoint)
		case u.RawQuery != "" || u.Fragment != "":
			add("Endpoint %q must not have a query or fragment", c.Endpoint)
		}
	}
	if c.AccessKey != "" && c.SecretKey == "" {
		add("SecretKey is required when AccessKey is set")
	}
	if c.SecretKey != "" && c.AccessKey == "" {
		add("AccessKey is required when SecretKey is set")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}
