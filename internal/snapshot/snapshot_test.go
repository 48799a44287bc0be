package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown, mknod and trusted.* xattrs")
	}
}

func writeFile(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // umask-proof
		t.Fatal(err)
	}
}

func randBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

// buildTree creates every kind of entry a box layer holds.
func buildTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "home/user/notes.txt"), []byte("hello\n"), 0o644)
	writeFile(t, filepath.Join(root, "home/user/.ssh/id"), []byte("secret"), 0o600)
	writeFile(t, filepath.Join(root, "home/user/bin/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	writeFile(t, filepath.Join(root, "a/b/c/d/deep.txt"), []byte("deep"), 0o640)
	writeFile(t, filepath.Join(root, "empty-file"), nil, 0o644)
	writeFile(t, filepath.Join(root, "big.bin"), randBytes(1, 32<<20), 0o644)
	must(os.MkdirAll(filepath.Join(root, "empty/dir/nested"), 0o755))
	must(os.Mkdir(filepath.Join(root, "private"), 0o700))
	must(os.Chmod(filepath.Join(root, "private"), 0o700))
	must(os.Chown(filepath.Join(root, "home/user/notes.txt"), 1234, 5678))
	must(os.Lchown(filepath.Join(root, "home/user"), 1000, 1000))

	// Sparse: 1 GiB apparent size, three small data regions.
	f, err := os.Create(filepath.Join(root, "sparse.img"))
	must(err)
	must(f.Truncate(1 << 30))
	for _, off := range []int64{0, 300 << 20, 1<<30 - 4096} {
		_, err := f.WriteAt(randBytes(uint64(off), 4096), off)
		must(err)
	}
	must(f.Close())
	// Only holes.
	f, err = os.Create(filepath.Join(root, "holes.img"))
	must(err)
	must(f.Truncate(64 << 20))
	must(f.Close())

	must(os.Symlink("home/user/notes.txt", filepath.Join(root, "link-rel")))
	must(os.Symlink("../../notes.txt", filepath.Join(root, "home/user/bin/up")))
	must(os.Symlink("/nonexistent/target", filepath.Join(root, "link-dangling")))
	must(os.Symlink("empty", filepath.Join(root, "link-to-dir")))
	must(os.Link(filepath.Join(root, "home/user/notes.txt"), filepath.Join(root, "hardlink.txt")))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	// Overlayfs markers: a whiteout and an opaque directory.
	must(unix.Mknod(filepath.Join(root, "home/user/deleted"), unix.S_IFCHR|0o000, 0))
	must(os.Mkdir(filepath.Join(root, "opaque"), 0o755))
	writeFile(t, filepath.Join(root, "opaque/kept"), []byte("k"), 0o644)
	if err := unix.Setxattr(filepath.Join(root, "opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatalf("this filesystem refuses trusted.* xattrs (%v): the opaque-dir case cannot be tested here", err)
	}
	must(unix.Setxattr(filepath.Join(root, "home/user/notes.txt"), "user.tag", []byte("v1"), 0))

	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(root, "home/user/notes.txt"), old, old))
	must(unix.Lutimes(filepath.Join(root, "link-rel"), []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}))
	must(os.Chtimes(filepath.Join(root, "empty/dir"), old, old))
}

// describeTree hashes type, mode, owner, mtime, link target, xattrs and
// content of every entry so two trees can be compared exactly.
func describeTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("mode=%v uid=%d gid=%d rdev=%d", fi.Mode(), st.Uid, st.Gid, st.Rdev)
		if rel != "." {
			desc += fmt.Sprintf(" mtime=%d", fi.ModTime().UnixNano())
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			// Big buffer: reading a 1 GiB hole 32 KiB at a time costs seconds.
			// (hide *os.File's WriterTo, which would ignore the buffer).
			_, err = io.CopyBuffer(h, struct{ io.Reader }{f}, make([]byte, 1<<20))
			f.Close()
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha=%x nlink=%d", fi.Size(), h.Sum(nil), st.Nlink)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			names, err := listXattrs(p)
			if err != nil {
				return err
			}
			sort.Strings(names)
			for _, n := range names {
				v, _ := getXattr(p, n)
				desc += fmt.Sprintf(" xattr[%s]=%q", n, v)
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compareTrees(t *testing.T, want, got map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		} else if g != w {
			t.Errorf("%s differs:\n got  %s\n want %s", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s", k)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	start := time.Now()
	buildTree(t, src)
	t.Logf("build: %v", time.Since(start))

	var buf bytes.Buffer
	start = time.Now()
	m, err := Export(ctx, src, &buf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("export: %d entries, %d raw bytes -> %d compressed in %v", m.Files, m.RawBytes, m.Bytes, time.Since(start))
	sum := sha256.Sum256(buf.Bytes())
	if m.SHA256 != hex.EncodeToString(sum[:]) || m.Bytes != int64(buf.Len()) {
		t.Fatalf("manifest %+v does not describe the stream (len %d)", m, buf.Len())
	}
	if m.Version != FormatVersion || m.Created.IsZero() {
		t.Fatalf("manifest %+v: version/created unset", m)
	}
	// 32 MiB of random data plus small files; the 1 GiB sparse file and
	// 64 MiB of holes must add almost nothing.
	if m.Bytes > 33<<20+1<<20 {
		t.Fatalf("stream is %d bytes: sparse files were not stored compactly", m.Bytes)
	}
	if m.Skipped != 0 {
		t.Fatalf("skipped %d entries, want 0", m.Skipped)
	}

	dst := filepath.Join(base, "dst")
	start = time.Now()
	got, err := Import(ctx, bytes.NewReader(buf.Bytes()), dst, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("import: %v", time.Since(start))
	if got.SHA256 != m.SHA256 || got.Files != m.Files || got.RawBytes != m.RawBytes || got.Bytes != m.Bytes {
		t.Fatalf("import manifest %+v, export manifest %+v", got, m)
	}
	start = time.Now()
	compareTrees(t, describeTree(t, src), describeTree(t, dst))
	t.Logf("compare: %v", time.Since(start))

	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "sparse.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("imported sparse.img allocates %d bytes, want it sparse", st.Blocks*512)
	} else {
		t.Logf("imported sparse.img: apparent 1 GiB, allocated %d KiB", st.Blocks/2)
	}
	// No temp dirs left beside the target.
	ents, _ := os.ReadDir(base)
	if len(ents) != 2 {
		t.Errorf("leftovers beside target: %v", ents)
	}
}

func TestImportIntoExistingEmptyDir(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	writeFile(t, filepath.Join(src, "f"), []byte("x"), 0o600)
	var buf bytes.Buffer
	m, err := Export(ctx, src, &buf)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(base, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(ctx, bytes.NewReader(buf.Bytes()), dst, m); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, describeTree(t, src), describeTree(t, dst))

	// A non-empty target is refused and left alone.
	_, err = Import(ctx, bytes.NewReader(buf.Bytes()), dst, m)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("import into non-empty dir: err = %v", err)
	}
}

func TestCorruptionLeavesRootAbsent(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	for i := range 50 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("d%d/f%d", i%5, i)), randBytes(uint64(i), 20000), 0o644)
	}
	var buf bytes.Buffer
	m, err := Export(ctx, src, &buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{buf.Len() / 2, buf.Len() - 1, 10} {
		bad := bytes.Clone(buf.Bytes())
		bad[at] ^= 0x40
		dst := filepath.Join(base, fmt.Sprintf("dst%d", at))
		_, err := Import(ctx, bytes.NewReader(bad), dst, m)
		if err == nil {
			t.Fatalf("flip at %d: import succeeded", at)
		}
		if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "snapshot checksum mismatch: got ") {
			t.Errorf("flip at %d: error does not name the checksum: %v", at, err)
		}
		t.Logf("flip at %d: %v", at, err)
		if _, serr := os.Lstat(dst); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("flip at %d: target exists after failed import", at)
		}
	}
	// Wrong manifest, intact stream: still refused.
	wrong := m
	wrong.SHA256 = strings.Repeat("0", 64)
	wrong.SnapshotID = "snap-42"
	_, err = Import(ctx, bytes.NewReader(buf.Bytes()), filepath.Join(base, "dstw"), wrong)
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "snap-42") {
		t.Errorf("wrong manifest: err = %v", err)
	}
	ents, _ := os.ReadDir(base)
	if len(ents) != 1 {
		t.Errorf("leftovers after failed imports: %v", ents)
	}
}

func TestVerifyingReader(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), randBytes(7, 100000), 0o644)
	var buf bytes.Buffer
	m, err := Export(ctx, src, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, bytes.NewReader(buf.Bytes()), m); err != nil {
		t.Fatalf("verify intact stream: %v", err)
	}
	bad := bytes.Clone(buf.Bytes())
	bad[len(bad)/3] ^= 1
	if err := Verify(ctx, bytes.NewReader(bad), m); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("verify corrupted stream: err = %v", err)
	}
	v := NewVerifyingReader(bytes.NewReader(buf.Bytes()[:buf.Len()-1]), m)
	if _, err := io.Copy(io.Discard, v); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("truncated stream through VerifyingReader: err = %v", err)
	}
}

// craft builds a tar+zstd stream by hand and a manifest for it.
func craft(t *testing.T, hdrs ...*tar.Header) ([]byte, Manifest) {
	t.Helper()
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if h.Format == tar.FormatUnknown {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(out.Bytes())
	return out.Bytes(), Manifest{SHA256: hex.EncodeToString(sum[:]), Bytes: int64(out.Len())}
}

func TestRejectsTraversal(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := &tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755}
	cases := map[string][]*tar.Header{
		"dotdot":     {dir, {Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		"inner-dots": {dir, {Name: "a/../../x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		"absolute":   {dir, {Name: "/tmp/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		"via-symlink": {dir,
			{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "l/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		"hardlink-out": {dir, {Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside/y"}},
	}
	for name, hdrs := range cases {
		t.Run(name, func(t *testing.T) {
			data, m := craft(t, hdrs...)
			dst := filepath.Join(base, "dst-"+name)
			_, err := Import(ctx, bytes.NewReader(data), dst, m)
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("err = %v, want ErrUnsafePath", err)
			}
			t.Logf("%v", err)
			if _, serr := os.Lstat(dst); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("target exists after rejected import")
			}
		})
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files escaped into %s: %v", outside, ents)
	}
}

func TestRefusedXattrIsReported(t *testing.T) {
	needRoot(t)
	data, m := craft(t,
		&tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644,
			PAXRecords: map[string]string{"SCHILY.xattr.bogusns.x": "1"}})
	dst := filepath.Join(t.TempDir(), "dst")
	_, err := Import(context.Background(), bytes.NewReader(data), dst, m)
	if err == nil || !strings.Contains(err.Error(), "set xattr bogusns.x") {
		t.Fatalf("err = %v, want a set xattr error", err)
	}
	if _, serr := os.Lstat(dst); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("target exists after failed import")
	}
}

func TestSkipsDevicesAndCancels(t *testing.T) {
	needRoot(t)
	src := t.TempDir()
	if err := unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "f"), []byte("x"), 0o644)
	m, err := Export(context.Background(), src, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if m.Skipped != 1 || m.Files != 1 {
		t.Fatalf("skipped=%d files=%d, want 1 and 1", m.Skipped, m.Files)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Export(ctx, src, io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled export: err = %v", err)
	}
}

// TestThroughput reports export and import rates for a ~200 MiB mixed tree.
// It logs rather than asserts: the rate depends on the machine.
func TestThroughput(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("short mode")
	}
	ctx := context.Background()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	for i := range 4 { // 100 MiB incompressible
		writeFile(t, filepath.Join(src, fmt.Sprintf("blobs/r%d", i)), randBytes(uint64(100+i), 25<<20), 0o644)
	}
	text := bytes.Repeat([]byte("func main() { fmt.Println(\"cocoonbox\") } // some source text\n"), 1<<20/64)
	for i := range 3000 { // ~47 MiB of small compressible files
		writeFile(t, filepath.Join(src, fmt.Sprintf("src/p%02d/f%04d.go", i%60, i)), text[:16<<10], 0o644)
	}
	big := bytes.Repeat(text, 56) // ~56 MiB compressible
	writeFile(t, filepath.Join(src, "logs/big.log"), big, 0o644)

	f, err := os.CreateTemp(base, "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	m, err := Export(ctx, src, f)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Since(start)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := Import(ctx, f, filepath.Join(base, "dst"), m); err != nil {
		t.Fatal(err)
	}
	imp := time.Since(start)
	mib := float64(m.RawBytes) / (1 << 20)
	t.Logf("tree: %d entries, %.1f MiB raw tar, %.1f MiB zstd (%.2fx)", m.Files, mib, float64(m.Bytes)/(1<<20), float64(m.RawBytes)/float64(m.Bytes))
	t.Logf("export: %v = %.0f MiB/s; import: %v = %.0f MiB/s (raw tar bytes, file-backed stream)",
		exp.Round(time.Millisecond), mib/exp.Seconds(), imp.Round(time.Millisecond), mib/imp.Seconds())
}
