package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportLimits: a stream with more entries or more bytes than the import allows is refused
// with an error naming the limit, and leaves neither the target nor a temporary directory;
// a stream exactly at both limits is imported.
func TestImportLimits(t *testing.T) {
	ctx := context.Background()
	hdrs := func(files int, size int64) []*tar.Header {
		hs := []*tar.Header{{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755}}
		for i := range files {
			hs = append(hs, &tar.Header{Name: fmt.Sprintf("f%d", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
		}
		return hs
	}
	// The decompressed size of hdrs(1, n): the root's and the file's PAX-less headers, the data
	// padded to a block, and the two zero blocks that end the archive.
	streamSize := func(n int64) int64 { return 512 + 512 + (n+511)/512*512 + 1024 }
	const size = 1 << 20
	limits := Limits{MaxEntries: 4, MaxBytes: streamSize(size)}
	for _, c := range []struct {
		name  string
		hdrs  []*tar.Header
		lim   Limits
		limit string // named in the error; "" for success
	}{
		{"entries at the limit", hdrs(3, 1), limits, ""},
		{"entries over the limit", hdrs(4, 1), limits, "more than 4 entries"},
		{"entries over the limit, bytes by default", hdrs(4, 1), Limits{MaxEntries: 4}, "more than 4 entries"},
		{"bytes at the limit", hdrs(1, size), limits, ""},
		{"bytes over the limit", hdrs(1, size+1), limits, fmt.Sprintf("more than %d bytes", streamSize(size))},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, h := range c.hdrs {
				h.Format = tar.FormatUSTAR
			}
			data, m := craft(t, c.hdrs...)
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			_, err := ImportLimits(ctx, bytes.NewReader(data), dst, m, c.lim)
			if c.limit == "" {
				if err != nil {
					t.Fatalf("import at the limit: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.limit) {
				t.Fatalf("err = %v, want ErrLimit naming %q", err, c.limit)
			}
			t.Log(err)
			if ents, _ := os.ReadDir(base); len(ents) != 0 {
				t.Fatalf("left behind after a refused import: %v", ents)
			}
		})
	}
}

// TestDefaultLimits: the limits a caller gets by leaving a field zero.
func TestDefaultLimits(t *testing.T) {
	got := Limits{}.withDefaults()
	if got.MaxEntries != DefaultMaxEntries || got.MaxBytes != DefaultMaxBytes || DefaultMaxEntries <= 0 || DefaultMaxBytes <= 0 {
		t.Fatalf("defaults %+v", got)
	}
	if keep := (Limits{MaxEntries: 7, MaxBytes: 9}).withDefaults(); keep != (Limits{MaxEntries: 7, MaxBytes: 9}) {
		t.Fatalf("set limits changed: %+v", keep)
	}
}
