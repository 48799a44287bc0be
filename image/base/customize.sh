#!/usr/bin/env bash
# customize.sh runs on the host after mmdebstrap, with the new root filesystem as $1. It trims
# what a box never uses (the image is read by every box and copied by no one, but smaller images
# build and page in faster) and names the box.
set -euo pipefail
root=${1:?usage: customize.sh ROOTFS}

rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
echo box >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost box\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# /tmp lives on the box's disk (the overlay), so it must be world-writable and sticky as usual.
chmod 1777 "$root/tmp"
