#!/usr/bin/env bash
# build.sh builds a box image's root filesystem from its recipe in image/NAME/ and caches it by
# the recipe's hash, so a machine builds each version of an image at most once:
#
#   image/build.sh NAME [CACHEDIR]   → prints CACHEDIR/NAME-<hash>/rootfs
#
#   image/build.sh --agent-sum       → rewrites image/agent.sum (see below) and exits
#
# CACHEDIR defaults to $COCOONBOX_IMAGE_CACHE, else ~/.cache/cocoonbox/images (under
# $XDG_CACHE_HOME when set, like Go's os.UserCacheDir, which the engine uses). The hash covers
# this script, the box init's source (image/boxinit/, compiled into every image) and the recipe,
# exactly as image.RecipeHash computes it in Go, so the engine finds the image it was built for.
# A recipe with a file NAME/agent also gets the resident agent (cmd/cocoonbox-agent, compiled
# static) as /usr/local/bin/cocoonbox-agent, and its hash covers the agent's source too.
# The build goes to a temporary directory renamed into place at the end: a half-built image is
# never seen. Needs root, mmdebstrap, Go, and the distribution's mirror.
#
# The distribution is part of the recipe: Debian bookworm from deb.debian.org, unless NAME/suite
# says otherwise in one line "SUITE [MIRROR [COMPONENTS]]", e.g.
# "noble http://archive.ubuntu.com/ubuntu main,universe" (docs/image.md). COCOONBOX_DEBIAN_MIRROR
# replaces the mirror (a local mirror or caching proxy of the same distribution): it changes where
# packages come from, not which, so it is not part of the hash.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: image/build.sh NAME [CACHEDIR] | --agent-sum}
cache=${2:-${COCOONBOX_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cocoonbox/images}}

# agent_sum prints the sha256sum lines of the resident agent's source, paths from the
# repository's root: agentvm/, cmd/cocoonbox-agent/ and proto/agentvm/, without tests (sorted
# bytewise, skipping names that start with . or _ and testdata directories). image/agent.sum
# holds a copy, which the Go side hashes instead (go:embed cannot reach outside image/); a test
# and every build of an agent image keep it current.
agent_sum() {
	(
		cd "$here/.."
		find agentvm cmd/cocoonbox-agent proto/agentvm \( -name '.*' -o -name '_*' -o -name testdata \) -prune \
			-o -type f ! -name '*_test.go' -print | LC_ALL=C sort | xargs sha256sum
	)
}
if [[ $name == --agent-sum ]]; then
	agent_sum >"$here/agent.sum"
	exit 0
fi

if [[ ! -f $here/$name/packages ]]; then
	echo "build.sh: no recipe image/$name/packages" >&2
	exit 1
fi
suite=bookworm mirror=http://deb.debian.org/debian components=main
if [[ -f $here/$name/suite ]]; then
	read -r suite recipe_mirror recipe_components _ <"$here/$name/suite" || true
	mirror=${recipe_mirror:-$mirror} components=${recipe_components:-$components}
fi
mirror=${COCOONBOX_DEBIAN_MIRROR:-$mirror}

# recipe_hash must stay in step with RecipeHash in image/image.go: the sha256sum lines of
# build.sh and of every file under boxinit/ and NAME/ (sorted bytewise, skipping names that start
# with . or _ as go:embed does), then, for a recipe with NAME/agent, a line for the agent's
# source as agent.sum, all hashed again and cut to 12 hex digits.
recipe_hash() {
	(
		cd "$here"
		{
			echo build.sh
			find boxinit "$name" \( -name '.*' -o -name '_*' \) -prune -o -type f -print | LC_ALL=C sort
		} | xargs sha256sum
		if [[ -f $name/agent ]]; then
			echo "$(agent_sum | sha256sum | cut -d' ' -f1)  agent.sum"
		fi
	) | sha256sum | cut -c1-12
}
hash=$(recipe_hash)
if [[ -f $here/$name/agent ]] && ! agent_sum | cmp -s - "$here/agent.sum"; then
	# The engine hashes image/agent.sum: a stale one names another image than this one.
	agent_sum >"$here/agent.sum"
	echo "build.sh: updated image/agent.sum (the agent's source changed); rebuild the engine" >&2
fi
dest=$cache/$name-$hash
if [[ -d $dest/rootfs ]]; then
	echo "$dest/rootfs"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.$name.lock"
flock 9 # a concurrent build of the same image waits, then finds it built
if [[ -d $dest/rootfs ]]; then
	echo "$dest/rootfs"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "build.sh: building an image needs root (mmdebstrap, device nodes)" >&2
	exit 1
fi

tmp=$(mktemp -d "$cache/.$name-$hash.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "build.sh: building image $name-$hash" >&2

# The init is static so that it runs in any image, whatever its libc.
(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/cocoonbox-init" ./image/boxinit)
# So is the agent, for the same reason; only images that ask for it carry it.
if [[ -f $here/$name/agent ]]; then
	(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/cocoonbox-agent" ./cmd/cocoonbox-agent)
fi

packages=$(sed -e 's/#.*//' "$here/$name/packages" | xargs | tr ' ' ',')
mmdebstrap --variant=minbase --components="$components" ${packages:+--include="$packages"} \
	"$suite" "$tmp/rootfs" "$mirror" >&2
install -D -m 0755 "$tmp/cocoonbox-init" "$tmp/rootfs/usr/local/sbin/cocoonbox-init"
rm "$tmp/cocoonbox-init"
if [[ -f $tmp/cocoonbox-agent ]]; then
	install -D -m 0755 "$tmp/cocoonbox-agent" "$tmp/rootfs/usr/local/bin/cocoonbox-agent"
	rm "$tmp/cocoonbox-agent"
fi
if [[ -x $here/$name/customize.sh ]]; then
	"$here/$name/customize.sh" "$tmp/rootfs"
fi
printf 'name=%s\nhash=%s\n' "$name" "$hash" >"$tmp/rootfs/etc/cocoonbox-image"

mv -T "$tmp" "$dest"
trap - EXIT
echo "$dest/rootfs"
