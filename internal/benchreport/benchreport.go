// Package benchreport reports benchmark samples as the p50/p95/p99 metrics that `make bench` turns
// into docs/benchmarks.md (scripts/benchtable.sh reads the metric names), so every benchmark
// package computes and names its figures the same way. ns/op is zeroed: the mean hides the tail,
// and the quantiles are the figures.
package benchreport

import (
	"slices"
	"testing"
	"time"
)

// Latency reports p50/p95/p99 of samples in milliseconds ("p50-ms", "p95-ms", "p99-ms").
func Latency(b *testing.B, samples []time.Duration) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, len(samples), "ms", func(q float64) float64 { return float64(quantile(samples, q).Microseconds()) / 1000 })
}

// Taken reports latency samples a benchmark already took, in turn with others, as its
// sub-benchmark name: the sub-benchmark runs nothing itself.
func Taken(b *testing.B, name string, samples []time.Duration) {
	b.Helper()
	b.Run(name, func(b *testing.B) {
		for b.Loop() {
		}
		Latency(b, samples)
	})
}

// Throughput reports MB/s (10^6 bytes per second) for transfers of size bytes that took samples.
// The quantiles are those of the transfer time, so p95 and p99 are the slow tail: the rate 95%
// and 99% of runs reached.
func Throughput(b *testing.B, size int64, samples []time.Duration) {
	b.Helper()
	Rate(b, float64(size)/1e6, "MB/s", samples)
}

// Rate reports n things per second (unit, such as "starts/s") for batches of n that took
// samples; as with Throughput, p95 and p99 are the slow tail.
func Rate(b *testing.B, n float64, unit string, samples []time.Duration) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, len(samples), unit, func(q float64) float64 { return n / quantile(samples, q).Seconds() })
}

// MiB reports p50/p95/p99 of samples given in MiB.
func MiB(b *testing.B, samples []float64) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, len(samples), "MiB", func(q float64) float64 { return quantile(samples, q) })
}

// Count reports p50/p95/p99 of samples that are counts of unit ("boxes").
func Count(b *testing.B, samples []float64, unit string) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, len(samples), unit, func(q float64) float64 { return quantile(samples, q) })
}

// needSamples fails b when it has nothing to report (a run that failed before it measured),
// rather than letting quantile panic: a panic ends the process without the benchmark's
// cleanups, and the boxes it started outlive it.
func needSamples(b *testing.B, n int) {
	b.Helper()
	if n == 0 {
		b.Fatal("no samples to report")
	}
}

// report reports the p50, p95 and p99 of the n samples in unit, at(q) being quantile q, and n:
// a benchmark's iterations are not its samples when one iteration takes several (a burst) or
// the samples are taken before its loop (taken in turn with another).
func report(b *testing.B, n int, unit string, at func(q float64) float64) {
	b.ReportMetric(float64(n), "samples")
	b.ReportMetric(at(0.50), "p50-"+unit)
	b.ReportMetric(at(0.95), "p95-"+unit)
	b.ReportMetric(at(0.99), "p99-"+unit)
	b.ReportMetric(0, "ns/op")
}

// quantile is the nearest-rank quantile p of sorted.
func quantile[T any](sorted []T, p float64) T {
	return sorted[int(p*float64(len(sorted)-1))]
}
