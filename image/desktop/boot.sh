#!/usr/bin/env bash
# The desktop image's boot hook, installed as /etc/cocoonbox/boot: cocoonbox-init runs it once,
# as root, when a box starts fresh (a woken box resumes the processes it had instead). Its output
# goes to the box's console log. It prepares what differs per box, then runs the resident agent
# (cocoonbox-agent) and the desktop side by side.
set -euo pipefail

log() { echo "cocoonbox-boot: $*" >&2; }

# D-Bus refuses to start without a machine ID; the image ships none so that boxes do not share one.
if [[ ! -s /etc/machine-id ]]; then
	dbus-uuidgen >/etc/machine-id
fi

# The agent serves the control plane on the box's loopback (a box has no NIC: the engine's ports
# relay is the only way in), as root for now, with its tools on the desktop's display. The control
# plane writes the per-box credential into /run/cocoonbox after boot; until then the agent
# answers every call UNAUTHENTICATED. Restarted if it ends: the control plane cannot restart it.
# GOGC=400 under a 256 MiB soft limit: a file copy allocates each 1 MiB message, and under gVisor
# the default GC's work held uploads to three quarters of this rate (make bench, BoxSession).
install -d -m 0700 /run/cocoonbox /var/lib/cocoonbox-agent
agent() {
	while :; do
		(cd /home/user && exec env DISPLAY=:0 HOME=/root GOGC=400 GOMEMLIMIT=256MiB /usr/local/bin/cocoonbox-agent serve \
			--listen 127.0.0.1:7070 --credential-file /run/cocoonbox/agent-credential \
			--journal /var/lib/cocoonbox-agent/journal --dir /home/user) || log "agent ended (status $?)"
		sleep 1
	done
}
agent &

/usr/local/bin/cocoonbox-desktop &
wait "$!" || log "desktop ended (status $?)"
# The agent stays up: the control plane still reaches the box through it.
wait
