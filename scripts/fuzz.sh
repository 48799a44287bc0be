#!/usr/bin/env bash
# Runs every fuzz target of the module (each `func FuzzXxx(f *testing.F)` in a _test.go file),
# one at a time, for $FUZZTIME each, and fails if any of them crashed. A crash leaves its input
# under the package's testdata/fuzz/FuzzXxx/, where `go test` (and so `make test`) replays it
# from then on: commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
go="${GO:-go}"
fuzztime="${FUZZTIME:-60s}"

# Tracked and new files alike, so a target being written is fuzzed before it is committed.
mapfile -t targets < <(git ls-files -co --exclude-standard -- '*_test.go' |
	xargs -r grep -HoE '^func Fuzz[A-Za-z0-9_]*\(' |
	sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
	sort -u)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

failed=()
for t in "${targets[@]}"; do
	dir="${t% *}" name="${t#* }"
	echo "fuzz: $name in ./$dir for $fuzztime"
	if ! "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir"; then
		failed+=("$name (./$dir)")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets ran $fuzztime each without a crash"
