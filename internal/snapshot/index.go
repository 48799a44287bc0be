package snapshot

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// An Index lists every entry of an exported tree with a digest of what its tar header stores
// (type, mode, owner, mtime, size, link target, xattrs, sparse map). Export writes one for the
// whole tree beside every stream; given the index of an earlier export as its base, Export writes
// only the entries whose digest changed and the names that are gone: an incremental stream.
//
// The digest is a quick check, as rsync's and restic's are: a file rewritten with the same size
// and mtime (to the nanosecond) and the same metadata is taken as unchanged.
type Index struct {
	digests map[string]digest
	names   []string // in walk order, so a deleted directory's names follow it
}

type digest [16]byte

// indexMagic starts an index stream, so a stray object is never taken for one.
const indexMagic = "cocoonbox-index 1"

// maxIndexLine bounds one line of an index stream: a digest and a quoted name of at most
// PATH_MAX bytes, every byte escaped.
const maxIndexLine = 32 + 1 + 4*4096 + 2

// Len is the number of entries, the root included.
func (x *Index) Len() int { return len(x.names) }

func (x *Index) add(name string, d digest) {
	if x.digests == nil {
		x.digests = map[string]digest{}
	}
	x.digests[name] = d
	x.names = append(x.names, name)
}

// headerDigest hashes the parts of hdr a restore reproduces. PAX records are taken sorted, so the
// digest does not depend on map order.
func headerDigest(hdr *tar.Header) digest {
	h := sha256.New()
	fmt.Fprintf(h, "%c\x00%o\x00%d\x00%d\x00%d\x00%d\x00%s\x00%d\x00%d\x00", hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid,
		hdr.ModTime.UnixNano(), hdr.Size, hdr.Linkname, hdr.Devmajor, hdr.Devminor)
	keys := make([]string, 0, len(hdr.PAXRecords))
	for k := range hdr.PAXRecords {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%q\x00", k, hdr.PAXRecords[k])
	}
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// WriteIndex writes x to w as a zstd stream of lines: the magic, then "<digest hex> <quoted name>"
// per entry in walk order.
func WriteIndex(w io.Writer, x *Index) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	bw := bufio.NewWriterSize(zw, 1<<16)
	bw.WriteString(indexMagic + "\n")
	for _, name := range x.names {
		d := x.digests[name]
		bw.WriteString(hex.EncodeToString(d[:]))
		bw.WriteByte(' ')
		bw.WriteString(strconv.Quote(name))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		zw.Close()
		return fmt.Errorf("write index: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	return nil
}

// ErrBadIndex is wrapped by errors for an index stream that is not one WriteIndex wrote.
var ErrBadIndex = errors.New("not a snapshot index")

// ReadIndex reads an index written by WriteIndex, refusing one over maxEntries entries (0: the
// import default), so a base index cannot exhaust memory.
func ReadIndex(r io.Reader, maxEntries int) (*Index, error) {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 1<<16), maxIndexLine)
	if !sc.Scan() || sc.Text() != indexMagic {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read index: %w", err)
		}
		return nil, fmt.Errorf("read index: %w: no %q line", ErrBadIndex, indexMagic)
	}
	x := &Index{digests: map[string]digest{}}
	for sc.Scan() {
		line := sc.Text()
		hexd, quoted, ok := strings.Cut(line, " ")
		var d digest
		if !ok || len(hexd) != 2*len(d) {
			return nil, fmt.Errorf("read index: %w: line %d", ErrBadIndex, len(x.names)+2)
		}
		if _, err := hex.Decode(d[:], []byte(hexd)); err != nil {
			return nil, fmt.Errorf("read index: %w: line %d: %v", ErrBadIndex, len(x.names)+2, err)
		}
		name, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("read index: %w: line %d: %v", ErrBadIndex, len(x.names)+2, err)
		}
		if _, dup := x.digests[name]; dup {
			return nil, fmt.Errorf("read index: %w: %q listed twice", ErrBadIndex, name)
		}
		if len(x.names) >= maxEntries {
			return nil, fmt.Errorf("read index: %w: more than %d entries", ErrLimit, maxEntries)
		}
		x.add(name, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	return x, nil
}

// changedSince counts the entries of x whose digest base does not have.
func (x *Index) changedSince(base *Index) int {
	n := 0
	for name, d := range x.digests {
		if was, ok := base.digests[name]; !ok || was != d {
			n++
		}
	}
	return n
}

// gone returns the names of base that are not in x, leaving out any under a directory that is
// itself gone: deleting the directory deletes them.
func (x *Index) gone(base *Index) []string {
	var out []string
	under := ""
	for _, name := range base.names {
		if under != "" && strings.HasPrefix(name, under) {
			continue
		}
		if _, ok := x.digests[name]; ok || name == "." {
			continue
		}
		out = append(out, name)
		under = name + "/"
	}
	return out
}
