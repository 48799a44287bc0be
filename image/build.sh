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
# Every run, cached or built, then prunes the other versions of NAME in CACHEDIR that no box uses
# (see prune below; COCOONBOX_IMAGE_KEEP=1 keeps them all): every box registers as a user of its
# image with a link in NAME-<hash>/users/ to its directory (internal/engine/runtime/imageuse.go).
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
# bytewise, skipping names that start with . or _, testdata directories and agentvm/agentvmtest,
# the agent's test fake, which no agent binary holds). image/agent.sum holds a copy, which the Go
# side hashes instead (go:embed cannot reach outside image/); a test and every build of an agent
# image keep it current.
agent_sum() {
	(
		cd "$here/.."
		find agentvm cmd/cocoonbox-agent proto/agentvm \( -name '.*' -o -name '_*' -o -name testdata -o -name agentvmtest \) -prune \
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

# An image is pruned only when nothing has used it for prune_grace minutes (build.sh returning
# it, or a box registering): another checkout with other sources may have just built it for
# tests whose boxes have not started yet.
prune_grace=60

# in_use DIR ORIG succeeds when the image in DIR (at ORIG in the cache until moved) has a user:
# a link in users/ that resolves to an existing directory (a live or hibernated box's Dir; a
# destroyed box's link dangles), or a mount of its rootfs (a running box of an engine that
# predates users/).
in_use() {
	local link
	for link in "$1"/users/*; do
		[[ -d $link ]] && return 0
	done
	grep -qF -- "$2/rootfs" /proc/self/mountinfo 2>/dev/null
}

# recent DIR succeeds when the image in DIR was returned or registered within prune_grace
# minutes.
recent() {
	local stamp=$1/users
	[[ -d $stamp ]] || stamp=$1
	[[ -n $(find "$stamp" -maxdepth 0 -mmin -"$prune_grace" 2>/dev/null) ]]
}

# drop_gone_users removes the links in DIR/users/ of boxes whose directories are gone, keeping
# users/'s time, which says when the image was last used.
drop_gone_users() {
	local used
	used=$(stat -c %Y "$1/users" 2>/dev/null) || return 0
	find "$1/users" -mindepth 1 -maxdepth 1 -xtype l -delete 2>/dev/null || true
	touch -m -d "@$used" "$1/users" 2>/dev/null || true
}

# prune removes every other NAME-<12 hex digits> directory of the cache that no box uses and
# nothing used recently, under NAME's lock (fd 9). An image is first renamed to a hidden
# .NAME-<hash>.pruned.XXXXXX, so no engine resolves it half-deleted, and its users are checked
# again there: a box registers before looking for its image (imageuse.go), so one that
# registered in between either finds it put back or does not find it at all. Leftovers of an
# interrupted prune go too. Build directories (.NAME-<hash>.XXXXXX) and anything else are left
# alone. Failures are reported, not fatal: the image asked for is there either way.
prune() {
	[[ ${COCOONBOX_IMAGE_KEEP:-} == 1 ]] && return 0
	local d rest old legacy=0
	for d in "$cache/.$name-"*.pruned.*; do
		rest=${d#"$cache/.$name-"}
		[[ $rest =~ ^[0-9a-f]{12}\.pruned\.[A-Za-z0-9]{6}$ && -d $d && ! -L $d ]] || continue
		if in_use "$d" "$cache/$name-${rest%%.*}"; then
			echo "build.sh: ${d##*/} has users again; keeping it (move it back to ${rest%%.*} by hand)" >&2
			continue
		fi
		rm -rf --one-file-system -- "$d" || echo "build.sh: could not remove ${d##*/}" >&2
	done
	for d in "$cache/$name-"*; do
		rest=${d#"$cache/$name-"}
		[[ $rest =~ ^[0-9a-f]{12}$ && $d != "$dest" && -d $d && ! -L $d ]] || continue
		if [[ ! -d $d/users ]]; then
			# Built before boxes registered: a hibernated box may still need it, and nothing
			# says which, so it stays (and boxes never give it a users/).
			legacy=$((legacy + 1))
			continue
		fi
		drop_gone_users "$d"
		if recent "$d" || in_use "$d" "$d"; then
			continue
		fi
		old=$(mktemp -d "$cache/.${d##*/}.pruned.XXXXXX") || continue
		if ! mv -T -- "$d" "$old"; then
			rmdir -- "$old" || true
			continue
		fi
		if in_use "$old" "$d"; then
			mv -T -- "$old" "$d" || echo "build.sh: could not put $d back from $old" >&2
			continue
		fi
		if rm -rf --one-file-system -- "$old"; then
			echo "build.sh: pruned unused image ${d##*/}" >&2
		else
			echo "build.sh: could not remove ${d##*/} (moved to ${old##*/})" >&2
		fi
	done
	if ((legacy > 0)); then
		echo "build.sh: kept $legacy $name image(s) in $cache built before boxes registered their use; remove them by hand once no box of theirs remains" >&2
	fi
}

# done_with prints the image's path after marking it used now and pruning: the caller (make
# image, tests) is about to start boxes from it.
done_with() {
	if [[ -d $dest/users ]]; then
		touch "$dest/users" || true
		drop_gone_users "$dest"
	fi
	prune || echo "build.sh: pruning old images failed" >&2
	echo "$dest/rootfs"
	exit 0
}

shopt -s nullglob
if [[ -d $dest/rootfs ]]; then
	# Cached: prune only when no other run holds the lock (a build, which prunes when done).
	if { exec 9>>"$cache/.$name.lock"; } 2>/dev/null && flock -n 9; then
		done_with
	fi
	echo "$dest/rootfs"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.$name.lock"
flock 9 # a concurrent build of the same image waits, then finds it built
if [[ -d $dest/rootfs ]]; then
	done_with
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
# The directory of the agent's credential is made here, so the exec that writes a new box's
# credential (internal/boxlink) starts no mkdir: each process a box starts costs about 30 ms.
install -d -m 0700 "$tmp/rootfs/run/cocoonbox"
if [[ -x $here/$name/customize.sh ]]; then
	"$here/$name/customize.sh" "$tmp/rootfs"
fi
printf 'name=%s\nhash=%s\n' "$name" "$hash" >"$tmp/rootfs/etc/cocoonbox-image"
mkdir "$tmp/users"

mv -T "$tmp" "$dest"
trap - EXIT
done_with
