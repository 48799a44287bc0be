package objstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// partCRC computes, over a stream as the uploader reads it, the CRC32s S3 reports for the object
// that stream becomes: the whole stream's, for an object sent in one PutObject (FULL_OBJECT), and
// each part's, from which the multipart object's COMPOSITE checksum is derived (the CRC32 of the
// parts' CRC32s, then "-" and the part count). The uploader reads parts in order, each of
// exactly the part size but the last, so the boundaries are known here without its help.
type partCRC struct {
	size  int64  // the part size
	whole uint32 // CRC32 of everything so far
	part  uint32 // CRC32 of the current part so far
	in    int64  // bytes of the current part so far
	parts []uint32
}

func newPartCRC(partSize int64) *partCRC { return &partCRC{size: partSize} }

func (c *partCRC) write(p []byte) {
	c.whole = crc32.Update(c.whole, crc32.IEEETable, p)
	for len(p) > 0 {
		n := min(int64(len(p)), c.size-c.in)
		c.part = crc32.Update(c.part, crc32.IEEETable, p[:n])
		c.in += n
		p = p[n:]
		if c.in == c.size {
			c.parts = append(c.parts, c.part)
			c.part, c.in = 0, 0
		}
	}
}

// composite returns the COMPOSITE checksum of the parts: base64 of the CRC32 of their big-endian
// CRC32s, with "-N".
func (c *partCRC) composite() string {
	parts := c.parts
	if c.in > 0 {
		parts = append(parts[:len(parts):len(parts)], c.part)
	}
	var buf []byte
	for _, p := range parts {
		buf = binary.BigEndian.AppendUint32(buf, p)
	}
	return b64(crc32.ChecksumIEEE(buf)) + "-" + strconv.Itoa(len(parts))
}

// matches compares the server's reported checksum of the object with what was sent. It returns
// false, nil when the server reported none (it need not), and an error naming both when they
// differ.
func (c *partCRC) matches(reported, kind string) (bool, error) {
	if reported == "" {
		return false, nil
	}
	want := b64(c.whole)
	if kind == "COMPOSITE" || strings.Contains(reported, "-") {
		want = c.composite()
	}
	if reported != want {
		return false, fmt.Errorf("the server reports CRC32 %s (%s), the bytes sent have %s", reported, kind, want)
	}
	return true, nil
}

func b64(v uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, v))
}
