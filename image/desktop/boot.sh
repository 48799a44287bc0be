#!/usr/bin/env bash
# The desktop image's boot hook, installed as /etc/cocoonbox/boot: cocoonbox-init runs it once,
# as root, when a box starts fresh (a woken box resumes the processes it had instead). Its output
# goes to the box's console log. It prepares what differs per box, then becomes the desktop.
# When the resident agent (cocoonbox-agent) arrives, this hook starts the agent instead and the
# agent runs cocoonbox-desktop itself.
set -euo pipefail

# D-Bus refuses to start without a machine ID; the image ships none so that boxes do not share one.
if [[ ! -s /etc/machine-id ]]; then
	dbus-uuidgen >/etc/machine-id
fi

exec /usr/local/bin/cocoonbox-desktop
