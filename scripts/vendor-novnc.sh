#!/usr/bin/env bash
# vendor-novnc.sh refreshes internal/web/static/novnc from npm's @novnc/novnc at the pinned
# version: its ES modules (core/) and their vendored pako, served as they are (no bundler) and
# embedded in the binary. The result is committed, so builds never need npm; run this only to
# move to another noVNC version, then review the diff.
set -euo pipefail
cd "$(dirname "$0")/.."
NOVNC_VERSION=1.7.0 # the first npm release that ships ES modules (core/) instead of CommonJS
dest=internal/web/static/novnc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@novnc/novnc@$NOVNC_VERSION" >/dev/null && tar xzf novnc-novnc-"$NOVNC_VERSION".tgz)
rm -rf "$dest"
mkdir -p "$dest"
cp -r "$tmp/package/core" "$tmp/package/vendor" "$tmp/package/LICENSE.txt" "$dest/"
echo "$NOVNC_VERSION" >"$dest/VERSION"
echo "vendored noVNC $NOVNC_VERSION into $dest"
