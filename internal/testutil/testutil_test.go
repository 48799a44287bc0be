package testutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalTB records the failure Eventually reports and stops it, as testing's Fatalf would.
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func failure(cond func() (bool, string)) (msg string) {
	tb := &fatalTB{}
	defer func() {
		if r := recover(); r != nil {
			msg = tb.msg
		}
	}()
	EventuallyReports(tb, 50*time.Millisecond, "the thing", cond)
	return ""
}

// TestEventually: a condition that comes true passes; one that never does fails naming what it
// waited for and what it last saw.
func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, WaitShort, "the third try", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("checked %d times", n)
	}
	msg := failure(func() (bool, string) { return false, "still 7" })
	if !strings.Contains(msg, "the thing") || !strings.Contains(msg, "still 7") || !strings.Contains(msg, "50ms") {
		t.Fatalf("failure reads %q", msg)
	}
	if msg := failure(func() (bool, string) { return true, "" }); msg != "" {
		t.Fatalf("a true condition failed: %q", msg)
	}
}

// TestPoll: Poll returns nil once check does, else check's last error after the wait, or when
// its context ends.
func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(context.Background(), WaitShort, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d checks", err, n)
	}
	err := Poll(context.Background(), 30*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), "30ms") {
		t.Fatalf("Poll past its wait = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := Poll(ctx, 0, func() error { return errors.New("never") }); err == nil || err.Error() != "never" {
		t.Fatalf("Poll to the end of its context = %v", err)
	}
}
