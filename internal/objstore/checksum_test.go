package objstore

import (
	"strings"
	"testing"
)

// TestPartCRCRefusesAnotherChecksum: the checksum the server reports must be the one of the
// bytes sent, part by part: a part that differs, a part more or a whole-object value for a
// multipart object are each refused, naming both values; no reported value is no check.
func TestPartCRCRefusesAnotherChecksum(t *testing.T) {
	sum := func(parts ...string) *partCRC {
		c := newPartCRC(4)
		for _, p := range parts {
			c.write([]byte(p))
		}
		return c
	}
	sent := sum("abcd", "efgh", "ij") // three parts of 4, 4 and 2 bytes, however the reads fell
	if got, want := sum("a", "bcdefghij").composite(), sent.composite(); got != want || !strings.HasSuffix(want, "-3") {
		t.Fatalf("composite over other read sizes: %s, want %s with 3 parts", got, want)
	}
	if ok, err := sent.matches(sent.composite(), "COMPOSITE"); !ok || err != nil {
		t.Errorf("its own composite: %v, %v", ok, err)
	}
	for name, reported := range map[string]string{
		"a part differs": sum("abcd", "efgX", "ij").composite(),
		"a part more":    sum("abcd", "efgh", "ijkl", "m").composite(),
		"whole object":   b64(sent.whole),
	} {
		if ok, err := sent.matches(reported, "COMPOSITE"); ok || err == nil || !strings.Contains(err.Error(), reported) {
			t.Errorf("%s: %v, %v; want refused naming %s", name, ok, err, reported)
		}
	}
	if ok, err := sent.matches("", ""); ok || err != nil {
		t.Errorf("nothing reported: %v, %v; want not checked, no error", ok, err)
	}
	if ok, err := sum("ab").matches(b64(sum("ab").whole), "FULL_OBJECT"); !ok || err != nil {
		t.Errorf("a single put's whole-object CRC32: %v, %v", ok, err)
	}
}
