package readahead_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/readahead"
)

// TestKeepsOrder reads a stream through buffers the reader reuses: every byte comes
// back once, in order, and the end after it.
func TestKeepsOrder(t *testing.T) {
	want := make([]byte, 10*1000+7)
	for i := range want {
		want[i] = byte(rand.IntN(256))
	}
	ra := readahead.New(3, readahead.Full(bytes.NewReader(want), 1000))
	var got []byte
	for {
		b, err := ra.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
	}
	ra.Stop(func() { t.Error("unblock called after the end was seen") })
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d sent in order", len(got), len(want))
	}
	if _, err := ra.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("next after the end: %v, want EOF", err)
	}
}

// TestStopsEarly stops a reading whose body blocks (a client still sending): stop
// unblocks the read under way and returns.
func TestStopsEarly(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(make([]byte, 1500)) }()
	ra := readahead.New(2, readahead.Full(pr, 1000))
	if b, err := ra.Next(); err != nil || len(b) != 1000 {
		t.Fatalf("next: %d bytes, %v", len(b), err)
	}
	ra.Stop(func() { _ = pr.CloseWithError(errors.New("deadline")) })
}

// TestReadError passes a read error on after the bytes before it.
func TestReadError(t *testing.T) {
	broken := errors.New("connection reset")
	ra := readahead.New(2, readahead.Full(io.MultiReader(bytes.NewReader(make([]byte, 500)), errReader{broken}), 1000))
	if b, err := ra.Next(); err != nil || len(b) != 500 {
		t.Fatalf("next: %d bytes, %v; want the 500 before the error", len(b), err)
	}
	if _, err := ra.Next(); !errors.Is(err, broken) {
		t.Fatalf("next: %v, want %v", err, broken)
	}
	ra.Stop(func() {})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
