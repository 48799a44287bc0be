#!/usr/bin/env bash
# cocoonbox-desktop starts the box's desktop and runs as long as it does: TigerVNC's Xvnc as
# display :0, serving RFB without a password on the box's loopback port 5900 only (a box has no
# NIC: the engine's ports relay is the only way in), and an XFCE session as `user` on it. It runs
# as root (the boot hook execs it), starts both as `user`, and ends, stopping the other, when
# either of them ends. Installed as /usr/local/bin/cocoonbox-desktop.
set -euo pipefail

user=user
display=:0
port=5900
geometry=1280x800
home=$(getent passwd "$user" | cut -d: -f6)
runtime_dir=/run/user/$(id -u "$user")

log() { echo "cocoonbox-desktop: $*" >&2; }

# as_user runs a command as $user with a clean login-like environment on the desktop's display.
as_user() {
	(cd "$home" && setpriv --reuid="$user" --regid="$user" --init-groups --reset-env -- \
		env DISPLAY="$display" LANG=C.UTF-8 XDG_RUNTIME_DIR="$runtime_dir" "$@")
}

install -d -m 0700 -o "$user" -g "$user" "$runtime_dir"

as_user Xvnc "$display" -geometry "$geometry" -depth 24 -desktop box \
	-SecurityTypes None -localhost -rfbport "$port" -nolisten tcp \
	-AlwaysShared -AcceptSetDesktopSize &
xvnc=$!

# The session's clients need the display up; Xvnc creates its socket once it accepts them.
for ((i = 0; i < 200; i++)); do
	[[ -S /tmp/.X11-unix/X${display#:} ]] && break
	if ! kill -0 "$xvnc" 2>/dev/null; then
		log "Xvnc exited before the display came up"
		exit 1
	fi
	sleep 0.05
done
log "Xvnc on display $display, RFB on 127.0.0.1:$port"
as_user xset s off s noblank || log "xset failed (screen blanking may stay on)"

as_user dbus-launch --exit-with-session startxfce4 &
session=$!
log "XFCE session started"

# Either one ending ends the desktop; the resident agent will restart it instead.
status=0
wait -n "$xvnc" "$session" || status=$?
log "desktop ended (status $status); stopping it"
kill "$xvnc" "$session" 2>/dev/null || true
wait || true
exit "$status"
