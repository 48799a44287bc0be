#!/usr/bin/env bash
# customize.sh runs on the host after mmdebstrap, with the new root filesystem as $1. It trims
# what a box never uses, names the box, adds the desktop's user and installs the boot hook that
# starts the desktop (boot.sh → /etc/cocoonbox/boot, desktop.sh → /usr/local/bin/cocoonbox-desktop).
set -euo pipefail
root=${1:?usage: customize.sh ROOTFS}
here=$(cd "$(dirname "$0")" && pwd)

rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
echo box >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost box\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# /tmp lives on the box's disk (the overlay), so it must be world-writable and sticky as usual;
# X wants its socket directory owned by root and sticky, made here so Xvnc need not be root.
chmod 1777 "$root/tmp"
install -d -m 1777 "$root/tmp/.X11-unix" "$root/tmp/.ICE-unix"
# Each box makes its own machine ID at boot (boot.sh).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"

# XFCE's system-wide defaults, read before a user has settings of their own.
xdg=$root/etc/xdg/xfce4/xfconf/xfce-perchannel-xml
install -d "$xdg"
# The panel's default layout as its configuration: without one, the panel's first start asks.
cp "$root/etc/xdg/xfce4/panel/default.xml" "$xdg/xfce4-panel.xml"
# Compositing costs CPU on a framebuffer nobody's GPU draws, and screen locking has no one to
# unlock it (none is installed).
cat >"$xdg/xfwm4.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfwm4" version="1.0">
  <property name="general" type="empty">
    <property name="use_compositing" type="bool" value="false"/>
  </property>
</channel>
XML
# Chromium inside gVisor: its own sandbox needs kernel features a box does not offer (the box is
# the sandbox), and there is no keyring daemon to ask for a password.
install -d "$root/etc/chromium.d"
cat >"$root/etc/chromium.d/cocoonbox" <<'SH'
# Added by the cocoonbox desktop image (image/desktop/customize.sh).
export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --no-sandbox --disable-dev-shm-usage --password-store=basic --no-first-run"
SH

# The desktop's user, uid 1000, without a password (nothing in a box logs in with one).
chroot "$root" useradd --create-home --uid 1000 --user-group --shell /bin/bash user

install -D -m 0755 "$here/boot.sh" "$root/etc/cocoonbox/boot"
install -D -m 0755 "$here/desktop.sh" "$root/usr/local/bin/cocoonbox-desktop"
