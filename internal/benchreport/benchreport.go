// Package benchreport reports benchmark samples as the p50/p95 metrics that `make bench` turns
// into docs/benchmarks.md (scripts/benchtable.sh reads the metric names), so every benchmark
// package computes and names its figures the same way. ns/op is zeroed: the mean hides the tail,
// and the quantiles are the figures.
package benchreport

import (
	"slices"
	"testing"
	"time"
)

// Latency reports p50/p95 of samples in milliseconds ("p50-ms", "p95-ms").
func Latency(b *testing.B, samples []time.Duration) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	report(b, ms(quantile(samples, 0.50)), ms(quantile(samples, 0.95)), "ms")
}

// Throughput reports MB/s (10^6 bytes per second) for transfers of size bytes that took samples.
// The quantiles are those of the transfer time, so p95 is the slow tail: the rate 95% of runs
// reached.
func Throughput(b *testing.B, size int64, samples []time.Duration) {
	b.Helper()
	Rate(b, float64(size)/1e6, "MB/s", samples)
}

// Rate reports n things per second (unit, such as "starts/s") for batches of n that took
// samples; as with Throughput, p95 is the slow tail.
func Rate(b *testing.B, n float64, unit string, samples []time.Duration) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	per := func(d time.Duration) float64 { return n / d.Seconds() }
	report(b, per(quantile(samples, 0.50)), per(quantile(samples, 0.95)), unit)
}

// MiB reports p50/p95 of samples given in MiB.
func MiB(b *testing.B, samples []float64) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, quantile(samples, 0.50), quantile(samples, 0.95), "MiB")
}

// Count reports p50/p95 of samples that are counts of unit ("boxes").
func Count(b *testing.B, samples []float64, unit string) {
	b.Helper()
	needSamples(b, len(samples))
	slices.Sort(samples)
	report(b, quantile(samples, 0.50), quantile(samples, 0.95), unit)
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

func report(b *testing.B, p50, p95 float64, unit string) {
	b.ReportMetric(p50, "p50-"+unit)
	b.ReportMetric(p95, "p95-"+unit)
	b.ReportMetric(0, "ns/op")
}

// quantile is the nearest-rank quantile p of sorted.
func quantile[T any](sorted []T, p float64) T {
	return sorted[int(p*float64(len(sorted)-1))]
}
