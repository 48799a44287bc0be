package activities

import (
	"bytes"
	"strings"
	"testing"
)

// TestRedactorRemovesTheKey: however the answer is cut into reads, the key never passes and
// everything else does, in order.
func TestRedactorRemovesTheKey(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	answer := `{"error":{"message":"Incorrect API key provided: ` + key + `. Header: Bearer ` + key + `"}}` + "\ns"
	want := strings.ReplaceAll(answer, key, redactedKey)
	for cut := 1; cut <= len(answer); cut++ {
		var out bytes.Buffer
		r := newRedactor(&out, key)
		for i := 0; i < len(answer); i += cut {
			if _, err := r.Write([]byte(answer[i:min(i+cut, len(answer))])); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), key) {
				t.Fatalf("reads of %d bytes: the key passed", cut)
			}
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want || r.hits != 2 {
			t.Fatalf("reads of %d bytes: got %q (%d hits), want %q", cut, out.String(), r.hits, want)
		}
	}
	// A stream with no trace of the key goes through unchanged and unheld.
	var out bytes.Buffer
	r := newRedactor(&out, key)
	_, _ = r.Write([]byte("data: {\"delta\":\"hello\"}\n\n"))
	if out.String() != "data: {\"delta\":\"hello\"}\n\n" {
		t.Fatalf("an event was held back or changed: %q", out.String())
	}
}
