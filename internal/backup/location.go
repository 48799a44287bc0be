package backup

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
)

// ParseLocation splits an s3://bucket/prefix location into its bucket and its prefix (which may
// be empty for the bucket's root). field names the flag or setting it came from, for the error.
func ParseLocation(field, loc string) (bucket, prefix string, err error) {
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", cocoonbox.Invalid(field, fmt.Sprintf("want s3://BUCKET/PREFIX, got %q", loc))
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" && (path.Clean(prefix) != prefix || strings.Contains(prefix, "..")) {
		return "", "", cocoonbox.Invalid(field, fmt.Sprintf("the prefix %q is not a plain folder path", prefix))
	}
	return u.Host, prefix, nil
}

// Folder is the folder a backup taken at t gets under prefix: one per backup, sorting by time.
func Folder(prefix string, t time.Time) string {
	return path.Join(prefix, t.UTC().Format("2006-01-02T15-04-05Z"))
}
