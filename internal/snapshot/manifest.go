// Package snapshot defines cocoonbox's snapshot stream: a box's writable
// layer serialised as tar compressed with zstd, plus the Manifest that
// describes it.
//
// It exists as a library of its own, free of Temporal, S3 and engine
// dependencies, so that the one thing a snapshot must get right — that what
// is restored is byte for byte what was saved, or the restore fails loudly —
// can be tested in isolation (DESIGN.md §6). Callers move the stream
// wherever they like (an S3 multipart upload, a pipe to the engine) and
// persist the Manifest next to it.
//
// Stream format (Manifest.Version 1):
//
//   - A single zstd stream (frame checksums on) of a PAX tar archive.
//   - The first entry is "." (the root directory itself); entries follow in
//     lexical walk order, so parents precede children. Names are relative,
//     slash-separated, and never contain "..".
//   - Regular files, directories, symlinks (never followed), hard links
//     (TypeLink to the first name seen), FIFOs, and character devices 0/0
//     (overlayfs whiteouts) are stored with mode, uid/gid and mtime. Other
//     devices and sockets are skipped and counted in Manifest.Skipped.
//   - Extended attributes of non-symlink entries (for example the overlayfs
//     opaque marker trusted.overlay.opaque=y) are stored as PAX
//     "SCHILY.xattr.<name>" records; security.selinux is not, because labels
//     belong to the host's policy, not the box's data.
//   - Sparse files are stored compactly with cocoonbox PAX records (see
//     paxSparseMap): the entry's body holds only the data extents. Go's
//     archive/tar cannot write GNU sparse entries, and streaming the holes
//     as zeros would cost a full read and compress of the apparent size.
//     A generic tar tool extracts such a file with its extents packed
//     together, so use Import, not tar, to restore a snapshot.
//   - An incremental stream (ExportOptions.Base) holds only the entries whose
//     Index digest changed since its base, in the same order, then one entry
//     per name that is gone, a PAX record COCOONBOX.deleted=1 on an empty
//     file. ImportChain applies such streams over the layers before them: an
//     entry replaces what is at its name (a directory stays and takes the new
//     metadata), a deletion removes the name and all under it.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// FormatVersion is the stream format written by Export and accepted by Import.
const FormatVersion = 1

// ErrChecksumMismatch is wrapped by every error that reports a stream whose
// sha256 or size differs from its manifest, so callers can tell corruption
// from I/O trouble with errors.Is.
var ErrChecksumMismatch = errors.New("snapshot checksum mismatch")

// Manifest describes one snapshot stream. Export and Import fill the stream
// fields; the identity fields belong to the caller, who sets them before
// storing the manifest beside the object.
type Manifest struct {
	// Version is the stream format version (FormatVersion).
	Version int `json:"version"`
	// SnapshotID, BoxID and ParentID identify the snapshot; set by the caller.
	SnapshotID string `json:"snapshot_id,omitempty"`
	BoxID      string `json:"box_id,omitempty"`
	ParentID   string `json:"parent_id,omitempty"`
	// BaseID is the snapshot an incremental stream was exported against (ExportOptions.Base):
	// restoring it needs that snapshot's layers first. Empty for a full stream. Set by the caller.
	BaseID string `json:"base_id,omitempty"`
	// Created is when Export started.
	Created time.Time `json:"created"`
	// Bytes is the length of the compressed stream.
	Bytes int64 `json:"bytes"`
	// SHA256 is the hex sha256 of the compressed stream, exactly as written.
	SHA256 string `json:"sha256"`
	// Files counts the entries in the archive other than the root directory
	// (files, directories, links, whiteouts, FIFOs).
	Files int64 `json:"files"`
	// RawBytes is the length of the uncompressed tar stream.
	RawBytes int64 `json:"raw_bytes"`
	// Skipped counts entries Export left out (sockets, real device nodes).
	Skipped int64 `json:"skipped,omitempty"`
	// Deleted counts the deletion entries of an incremental stream.
	Deleted int64 `json:"deleted,omitempty"`
}

// countingHash records the size and sha256 of everything written to it; it
// sits on the compressed side of both Export and Import.
type countingHash struct {
	h hash.Hash
	n int64
}

func newCountingHash() *countingHash { return &countingHash{h: sha256.New()} }

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// check compares what was seen with the manifest. A size check is only made
// when the manifest carries one, but the sha256 is always required: a
// snapshot without a checksum cannot be trusted.
func (c *countingHash) check(want Manifest) error {
	if want.SHA256 == "" {
		return fmt.Errorf("verify snapshot %s: manifest has no sha256", want.SnapshotID)
	}
	got := c.sum()
	if got != want.SHA256 {
		return fmt.Errorf("%w%s: got %s, want %s", ErrChecksumMismatch, idSuffix(want), got, want.SHA256)
	}
	if want.Bytes > 0 && c.n != want.Bytes {
		return fmt.Errorf("%w%s: got %d bytes, want %d", ErrChecksumMismatch, idSuffix(want), c.n, want.Bytes)
	}
	return nil
}

func idSuffix(m Manifest) string {
	if m.SnapshotID == "" {
		return ""
	}
	return " for snapshot " + m.SnapshotID
}

// VerifyingReader passes a compressed snapshot stream through unchanged and,
// when the underlying reader reaches io.EOF, compares the bytes seen with the
// manifest. On a mismatch the final Read returns an error wrapping
// ErrChecksumMismatch instead of io.EOF, so any consumer that reads to the
// end (io.Copy to a file, to io.Discard, to an uploader) fails rather than
// accepting a corrupted object.
type VerifyingReader struct {
	r    io.Reader
	want Manifest
	ch   *countingHash
	err  error
}

// NewVerifyingReader returns a VerifyingReader checking r against want.
func NewVerifyingReader(r io.Reader, want Manifest) *VerifyingReader {
	return &VerifyingReader{r: r, want: want, ch: newCountingHash()}
}

// Read implements io.Reader.
func (v *VerifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.ch.Write(p[:n])
	if err == io.EOF {
		if cerr := v.ch.check(v.want); cerr != nil {
			err = cerr
		}
		v.err = err
	}
	return n, err
}

// Bytes reports how many bytes have passed through so far.
func (v *VerifyingReader) Bytes() int64 { return v.ch.n }

// SHA256 reports the hex sha256 of the bytes read so far.
func (v *VerifyingReader) SHA256() string { return v.ch.sum() }

// Verify reads r to the end and checks it against want without extracting
// anything, e.g. to audit an object already in S3.
func Verify(ctx context.Context, r io.Reader, want Manifest) error {
	v := NewVerifyingReader(&ctxReader{ctx: ctx, r: r}, want)
	if _, err := io.Copy(io.Discard, v); err != nil {
		return fmt.Errorf("verify snapshot: %w", err)
	}
	return nil
}

// ctxReader makes long copies cancellable between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
