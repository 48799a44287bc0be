package devstack_test

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/benchreport"
)

// timed is one of the calls interleaved compares: it returns how long the part it measures took
// (set-up it needs, such as letting the box settle, stays out of the figure).
type timed struct {
	name string
	call func(b *testing.B) time.Duration
}

// interleaved runs the calls in turn, one of each per round, in the orders of roundOrder, and
// reports each as a sub-benchmark of its name. Figures run one after another drift with
// what the machine and the box are doing (a desktop just up keeps the CPU busy for a while), by
// more than the few milliseconds between ours and the raw figure under it; calls in turn share
// every moment, so their ratio is the cost of our layer. The rounds are the -benchtime count,
// and at least atLeast: where ours and the raw figure differ by a few milliseconds, ten samples
// of each leave their medians that far apart by chance.
func interleaved(b *testing.B, atLeast int, calls ...timed) {
	b.Helper()
	rounds := max(benchRounds(), atLeast)
	samples := make([][]time.Duration, len(calls))
	for r := range rounds {
		for _, k := range roundOrder(len(calls), r) {
			samples[k] = append(samples[k], calls[k].call(b))
		}
	}
	for k, c := range calls {
		benchreport.Taken(b, c.name, samples[k])
	}
}

// roundOrder is the order of n calls in round r: a Williams design, in which over n rounds
// (2n when n is odd) each call runs right after each other call equally often. What a call
// leaves behind (a box just woken, a seal under way) falls on the call after it; starting each
// round one call later, as before, put the running desktop sample after the hibernated one in
// two rounds of three and the raw sample in one.
func roundOrder(n, r int) []int {
	first := make([]int, n) // 0, 1, n-1, 2, n-2, …
	for i, lo, hi := 1, 1, n-1; i < n; i++ {
		if i%2 == 1 {
			first[i], lo = lo, lo+1
		} else {
			first[i], hi = hi, hi-1
		}
	}
	period := n
	if n%2 == 1 {
		period = 2 * n // the rows and the rows reversed
	}
	q := r % period
	order := make([]int, n)
	for i, c := range first {
		order[i] = (c + q) % n
	}
	if q >= n {
		slices.Reverse(order)
	}
	return order
}

// benchRounds is the count of -benchtime Nx (make bench's BENCHTIME), or 10 when it is a
// duration.
func benchRounds() int {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return 10
	}
	n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x"))
	if err != nil || !strings.HasSuffix(f.Value.String(), "x") || n < 1 {
		return 10
	}
	return n
}

// since runs call and returns how long it took, failing b on its error.
func since(b *testing.B, call func() error) time.Duration {
	b.Helper()
	start := time.Now()
	if err := call(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
