#!/usr/bin/env bash
# benchtable.sh turns `go test -bench` output (p50-ms/p95-ms metrics) on stdin into the Markdown
# of docs/benchmarks.md on stdout: every figure, and each of ours beside the raw figure under it.
set -euo pipefail
raw=$(cat)
cat <<HEAD
# Benchmarks

Written by \`make bench\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(go env GOVERSION)).
Latencies in milliseconds over repeated runs (n). Numbers vary with machine load; compare ratios
within one run, not absolute figures across runs. Start figures are measured in one process;
a fresh \`cocoonbox dev\` process adds about 0.5 s of Temporal server initialisation.

HEAD
echo "$raw" | awk '
BEGIN {
	what["DevStartFirst"] = "cocoonbox dev, first start (initdb, Temporal schema, bootstrap)"
	what["DevStartRestart"] = "cocoonbox dev, start on an existing data dir"
	what["RawTemporalStart"] = "raw: embedded Temporal server alone, existing data dir"
	what["WorkflowRoundTrip"] = "trivial workflow: start and wait for the result"
	what["RawTemporalRPC"] = "raw: one Temporal frontend RPC (health check)"
	what["APIHealthz"] = "GET /healthz (Temporal, PostgreSQL, S3 checked in parallel)"
	what["APIWhoAmI"] = "authenticated gRPC call (WhoAmI: token lookup in PostgreSQL)"
	pair["DevStartRestart"] = "RawTemporalStart"
	pair["WorkflowRoundTrip"] = "RawTemporalRPC"
	print "| benchmark | what | n | p50 ms | p95 ms |"
	print "|---|---|---:|---:|---:|"
}
/^Benchmark/ {
	name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
	n = $2; p50 = ""; p95 = ""
	for (i = 3; i < NF; i++) { if ($(i+1) == "p50-ms") p50 = $i; if ($(i+1) == "p95-ms") p95 = $i }
	order[++count] = name; P50[name] = p50
	printf "| %s | %s | %s | %s | %s |\n", name, what[name], n, p50, p95
}
END {
	print ""
	print "Ours beside the raw figure of the part underneath (p50):"
	print ""
	print "| ours | raw | ours ms | raw ms | ratio |"
	print "|---|---|---:|---:|---:|"
	for (i = 1; i <= count; i++) {
		o = order[i]; r = pair[o]
		if (r == "" || !(r in P50) || P50[r] == 0) continue
		printf "| %s | %s | %s | %s | %.1fx |\n", o, r, P50[o], P50[r], P50[o] / P50[r]
	}
}'
