package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// exportLayer exports src against base (nil: a full export) and returns the stream, its
// manifest and the tree's new index.
func exportLayer(t *testing.T, src string, base *Index) ([]byte, Manifest, *Index) {
	t.Helper()
	var stream, index bytes.Buffer
	m, err := ExportWith(context.Background(), src, &stream, ExportOptions{Base: base, Index: &index})
	if err != nil {
		t.Fatal(err)
	}
	x, err := ReadIndex(&index, 0)
	if err != nil {
		t.Fatal(err)
	}
	return stream.Bytes(), m, x
}

func importChain(t *testing.T, dst string, streams [][]byte, ms []Manifest) error {
	t.Helper()
	layers := make([]Layer, len(streams))
	for i := range streams {
		layers[i] = Layer{R: bytes.NewReader(streams[i]), Want: ms[i]}
	}
	_, err := ImportChain(context.Background(), layers, dst, Limits{})
	return err
}

// TestIncrementalChain: a full snapshot and five incremental ones, each exported against the
// index of the one before, restore byte-exact at every length of the chain, through every
// kind of change a box makes (content, metadata, xattrs, deletions, a file turned directory
// and back, symlinks retargeted and replaced, hard links split, whiteouts); an incremental
// stream holds only what changed.
func TestIncrementalChain(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	src := filepath.Join(base, "src")
	buildTree(t, src)
	p := func(rel string) string { return filepath.Join(src, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	later := time.Date(2025, 6, 7, 8, 9, 10, 11, time.UTC)
	rounds := []struct {
		name   string
		change func()
		most   int64 // the incremental stream's size at most
	}{
		{"new and changed files, a deleted tree, metadata", func() {
			writeFile(t, p("home/user/new-10MiB.bin"), randBytes(10, 10<<20), 0o644)
			writeFile(t, p("home/user/notes.txt"), []byte("HELLO\n"), 0o644) // same size, new mtime
			must(os.RemoveAll(p("a/b")))
			must(os.Chmod(p("home/user/bin/run.sh"), 0o700))
			must(os.Lchown(p("private"), 42, 43))
			must(unix.Setxattr(p("home/user/notes.txt"), "user.tag", []byte("v2"), 0))
		}, 10<<20 + 1<<20},
		{"nothing changed", func() {}, 4 << 10},
		{"types change places", func() {
			must(os.Remove(p("empty-file")))
			writeFile(t, p("empty-file/now-a-dir"), []byte("d"), 0o600)
			must(os.RemoveAll(p("empty/dir")))
			writeFile(t, p("empty/dir"), []byte("now a file"), 0o644)
			must(os.Remove(p("link-rel")))
			must(os.Symlink("big.bin", p("link-rel")))
			must(os.Remove(p("link-to-dir")))
			writeFile(t, p("link-to-dir/inside"), []byte("was a symlink"), 0o644)
			must(os.Remove(p("home/user/notes.txt"))) // the first name of a hard-link pair
			must(os.Chtimes(p("home/user"), later, later))
		}, 64 << 10},
		{"overlay markers and special files", func() {
			must(os.Remove(p("home/user/deleted")))                          // a whiteout undone
			must(unix.Mknod(p("home/user/bin/gone"), unix.S_IFCHR|0o000, 0)) // a new one
			must(unix.Removexattr(p("opaque"), "trusted.overlay.opaque"))    // no longer opaque
			must(os.Remove(p("fifo")))
			f, err := os.OpenFile(p("sparse.img"), os.O_WRONLY, 0)
			must(err)
			_, err = f.WriteAt(randBytes(99, 4096), 600<<20)
			must(err)
			must(f.Close())
		}, 64 << 10},
		{"a directory deleted and made again", func() {
			must(os.RemoveAll(p("home/user/bin")))
			writeFile(t, p("home/user/bin/other"), []byte("other"), 0o755)
			must(os.Link(p("big.bin"), p("home/user/bin/big-again")))
		}, 33 << 20},
	}

	full, m0, idx := exportLayer(t, src, nil)
	streams, ms := [][]byte{full}, []Manifest{m0}
	for i, r := range rounds {
		r.change()
		s, m, next := exportLayer(t, src, idx)
		checkIndexer(t, src, idx, next)
		t.Logf("%s: %d entries, %d deleted, %d bytes", r.name, m.Files, m.Deleted, m.Bytes)
		if m.Bytes > r.most {
			t.Errorf("%s: incremental stream is %d bytes, want at most %d", r.name, m.Bytes, r.most)
		}
		streams, ms, idx = append(streams, s), append(ms, m), next
		dst := filepath.Join(base, "dst", string(rune('1'+i)))
		must(os.MkdirAll(filepath.Dir(dst), 0o755))
		if err := importChain(t, dst, streams, ms); err != nil {
			t.Fatalf("%s: import chain of %d: %v", r.name, len(streams), err)
		}
		compareTrees(t, describeTree(t, src), describeTree(t, dst))
		if t.Failed() {
			t.Fatalf("%s: restored tree differs", r.name)
		}
	}
	if ms[2].Files != 0 || ms[2].Deleted != 0 {
		t.Errorf("an export with nothing changed holds %d entries and %d deletions", ms[2].Files, ms[2].Deleted)
	}
}

// checkIndexer fails t unless an Indexer over src against base makes index, the export's, and
// says changed of exactly the entries whose digest base lacks.
func checkIndexer(t *testing.T, src string, base, index *Index) {
	t.Helper()
	ix := NewIndexer(base)
	changed := 0
	err := filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		c, err := ix.Add(p, filepath.ToSlash(rel))
		if c {
			changed++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	if err := WriteIndex(&got, ix.Index()); err != nil {
		t.Fatal(err)
	}
	if err := WriteIndex(&want, index); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Error("the Indexer's index is not the export's")
	}
	if n := index.changedSince(base); changed != n {
		t.Errorf("the Indexer says %d entries changed, the export's index %d", changed, n)
	}
}

// TestChainRefusesEscapes: a later layer cannot reach outside the tree through a symlink an
// earlier layer made, neither to write nor to delete, and a full snapshot cannot carry a
// deletion.
func TestChainRefusesEscapes(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	writeFile(t, filepath.Join(outside, "victim"), []byte("keep me"), 0o644)
	first, m1 := craft(t, &tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "x", Typeflag: tar.TypeSymlink, Linkname: outside})
	del := func(name string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, PAXRecords: map[string]string{paxDeleted: "1"}}
	}
	for _, c := range []struct {
		name string
		hdr  *tar.Header
	}{
		{"write through", &tar.Header{Name: "x/victim", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}},
		{"delete through", del("x/victim")},
	} {
		second, m2 := craft(t, c.hdr)
		dst := filepath.Join(base, "dst-"+strings.ReplaceAll(c.name, " ", "-"))
		err := importChain(t, dst, [][]byte{first, second}, []Manifest{m1, m2})
		if !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%s: err = %v, want ErrUnsafePath", c.name, err)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "keep me" {
			t.Fatalf("%s: the file outside the tree was touched", c.name)
		}
		if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: target exists after a refused chain", c.name)
		}
	}
	bad, mb := craft(t, &tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755}, del("y"))
	if err := importChain(t, filepath.Join(base, "dst-full"), [][]byte{bad}, []Manifest{mb}); err == nil ||
		!strings.Contains(err.Error(), "deletion") {
		t.Errorf("a full snapshot with a deletion: err = %v", err)
	}
}

// TestReadIndexRefusesJunk: an index that is not one, or over the entry limit, is refused.
func TestReadIndexRefusesJunk(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(src, n), []byte(n), 0o644)
	}
	var stream, index bytes.Buffer
	if _, err := ExportWith(context.Background(), src, &stream, ExportOptions{Index: &index}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIndex(bytes.NewReader(index.Bytes()), 3); !errors.Is(err, ErrLimit) {
		t.Errorf("four entries with a limit of three: err = %v", err)
	}
	if x, err := ReadIndex(bytes.NewReader(index.Bytes()), 0); err != nil || x.Len() != 4 {
		t.Errorf("ReadIndex = %v entries, %v; want 4", x, err)
	}
	if _, err := ReadIndex(bytes.NewReader(stream.Bytes()), 0); !errors.Is(err, ErrBadIndex) {
		t.Errorf("a snapshot stream read as an index: err = %v", err)
	}
}
