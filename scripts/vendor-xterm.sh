#!/usr/bin/env bash
# vendor-xterm.sh refreshes internal/web/static/xterm from npm's @xterm/xterm and its fit addon at
# the pinned versions: their ES module builds and stylesheet, served as they are (no bundler) and
# embedded in the binary for the web app's terminal. The result is committed, so builds never
# need npm; run this only to move to other versions, then review the diff.
set -euo pipefail
cd "$(dirname "$0")/.."
XTERM_VERSION=6.0.0
FIT_VERSION=0.11.0
dest=internal/web/static/xterm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$FIT_VERSION" >/dev/null)
rm -rf "$dest"
mkdir -p "$dest" "$tmp/xterm" "$tmp/fit"
tar xzf "$tmp/xterm-xterm-$XTERM_VERSION.tgz" -C "$tmp/xterm"
tar xzf "$tmp/xterm-addon-fit-$FIT_VERSION.tgz" -C "$tmp/fit"
cp "$tmp/xterm/package/lib/xterm.mjs" "$tmp/xterm/package/css/xterm.css" "$dest/"
cp "$tmp/xterm/package/LICENSE" "$dest/LICENSE.txt"
cp "$tmp/fit/package/lib/addon-fit.mjs" "$dest/"
# The builds end with a sourceMappingURL to maps not vendored; drop the line so browsers do not ask.
sed -i '/^\/\/# sourceMappingURL=/d' "$dest/xterm.mjs" "$dest/addon-fit.mjs"
printf 'xterm %s\naddon-fit %s\n' "$XTERM_VERSION" "$FIT_VERSION" >"$dest/VERSION"
echo "vendored xterm $XTERM_VERSION and addon-fit $FIT_VERSION into $dest"
