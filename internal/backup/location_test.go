package backup

import (
	"strings"
	"testing"
	"time"
)

func TestParseLocation(t *testing.T) {
	for _, tc := range []struct {
		in, bucket, prefix, err string
	}{
		{in: "s3://backups/cocoonbox", bucket: "backups", prefix: "cocoonbox"},
		{in: "s3://backups/a/b/", bucket: "backups", prefix: "a/b"},
		{in: "s3://backups", bucket: "backups"},
		{in: "https://backups/x", err: "want s3://BUCKET/PREFIX"},
		{in: "s3:///x", err: "want s3://BUCKET/PREFIX"},
		{in: "s3://b/x/../y", err: "not a plain folder path"},
		{in: "s3://b/x?versionId=1", err: "want s3://BUCKET/PREFIX"},
	} {
		bucket, prefix, err := ParseLocation("to", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "to") {
				t.Errorf("ParseLocation(%q) = %v, want an error naming to: %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || bucket != tc.bucket || prefix != tc.prefix {
			t.Errorf("ParseLocation(%q) = %q, %q, %v", tc.in, bucket, prefix, err)
		}
	}
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if got := Folder("cocoonbox", at); got != "cocoonbox/2026-12-05T10-00-00Z" {
		t.Errorf("Folder = %q", got)
	}
	if got := Folder("", at); got != "2026-12-05T10-00-00Z" || checkPrefix(got) != nil {
		t.Errorf("Folder at the root = %q (%v)", got, checkPrefix(got))
	}
	if checkPrefix("") == nil || checkPrefix("/abs") == nil || checkPrefix("a/../b") == nil {
		t.Error("checkPrefix let a bad folder through")
	}
}
