package devstack_test

import (
	"flag"
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

// interleaved runs the calls in turn, one of each per round, starting each round one call later,
// and reports each as a sub-benchmark of its name. Figures run one after another drift with
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
		for i := range calls {
			k := (r + i) % len(calls)
			samples[k] = append(samples[k], calls[k].call(b))
		}
	}
	for k, c := range calls {
		benchreport.Taken(b, c.name, samples[k])
	}
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
