package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzImport feeds arbitrary tar streams (compressed here, so the fuzzer works on the tar
// grammar rather than on zstd's) through ImportLimits with small limits, and checks that a
// refused stream leaves nothing behind, an accepted one lands only at the target, and neither
// exceeds the limits. The seed corpus under testdata/fuzz/FuzzImport holds one stream of each
// entry kind, traversal attempts and streams over each limit.
func FuzzImport(f *testing.F) {
	lim := Limits{MaxEntries: 16, MaxBytes: 64 << 10}
	f.Fuzz(func(t *testing.T, stream []byte) {
		var z bytes.Buffer
		zw, err := zstd.NewWriter(&z, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = zw.Write(stream)
		_ = zw.Close()
		sum := sha256.Sum256(z.Bytes())
		m := Manifest{SHA256: hex.EncodeToString(sum[:])}

		base := t.TempDir()
		dst := filepath.Join(base, "dst")
		got, err := ImportLimits(context.Background(), bytes.NewReader(z.Bytes()), dst, m, lim)
		ents, _ := os.ReadDir(base)
		if err != nil {
			if len(ents) != 0 {
				t.Fatalf("refused (%v) but left %v", err, ents)
			}
			return
		}
		if len(ents) != 1 || ents[0].Name() != "dst" {
			t.Fatalf("accepted, but the base holds %v", ents)
		}
		if got.Files >= int64(lim.MaxEntries) || got.RawBytes > lim.MaxBytes {
			t.Fatalf("accepted %d files, %d bytes over limits %+v", got.Files, got.RawBytes, lim)
		}
	})
}
