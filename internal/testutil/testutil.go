// Package testutil holds what tests across packages share: named waits, so a slow machine fails
// with a reason instead of hanging, and polls that name what they waited for.
package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Named waits.
const (
	// WaitShort bounds what is already under way: a process answering, a file appearing, a
	// row changing.
	WaitShort = 10 * time.Second
	// WaitLong bounds what does real work first: a box booting its desktop, a restore, a
	// cluster starting.
	WaitLong = 60 * time.Second
)

// backoff is how long to sleep after the n-th failed check: from 5 ms, doubling, at most 250 ms.
func backoff(n int) time.Duration {
	return min(5*time.Millisecond<<min(n, 6), 250*time.Millisecond)
}

// Eventually checks cond until it holds or within passes, then fails tb naming what it waited
// for and, if seen is given, what cond saw last.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool, seen ...*string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for n := 0; !cond(); n++ {
		if time.Now().After(deadline) {
			last := ""
			if len(seen) > 0 && seen[0] != nil {
				last = " (last seen: " + *seen[0] + ")"
			}
			tb.Fatalf("timed out after %s waiting for %s%s", within, what, last)
		}
		time.Sleep(backoff(n))
	}
}

// EventuallyReports is Eventually for a cond that says what it saw.
func EventuallyReports(tb testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	var saw string
	Eventually(tb, within, what, func() bool {
		ok, s := cond()
		saw = s
		return ok
	}, &saw)
}

// Poll calls check until it returns nil, ctx ends or within passes (0: only ctx bounds it), and
// returns check's last error, for waits whose caller decides what a timeout means.
func Poll(ctx context.Context, within time.Duration, check func() error) error {
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	for n := 0; ; n++ {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if within > 0 {
				return fmt.Errorf("after %s: %w", within, err)
			}
			return err
		case <-time.After(backoff(n)):
		}
	}
}
