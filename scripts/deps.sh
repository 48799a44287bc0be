#!/usr/bin/env bash
# deps.sh installs every system package and tool cocoonbox needs, and only what is missing, so it
# is fast when everything is present. Run as root on Debian 12 (make deps calls it).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned tool versions. Bump them here; make gen output depends on them.
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
# gVisor's runsc, the local sandbox engine's box runtime. gvisor.dev/gvisor is served by the Go
# module proxy as pseudo-versions of gVisor's go branch; this one builds with our Go and passes
# the runtime tests (checkpoint/restore on the systrap platform).
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
WORKFLOWCHECK_VERSION=v0.6.0

APT_PACKAGES=(
	postgresql-15        # the managed database of `cocoonbox dev` and the test harness
	protobuf-compiler    # protoc, for make gen
	libprotobuf-dev      # the well-known types (timestamp.proto) make gen imports
	mmdebstrap           # builds the box images (make image)
	zstd                 # the snapshot benchmark's raw `tar | zstd` baseline
	e2fsprogs            # mkfs.ext4: each box's disk is an ext4 filesystem of its quota
	iproute2             # ip: each networked box's namespace, veth pair and addresses
	nftables             # nft: each networked box's egress policy and NAT, outside the box
	chromium             # the browser go-rod drives in tests (the web app's desktop test)
	tmux                 # the terminal a person types box shell into, in its test
	xvfb                 # a headless X server for the native-viewer test; -fbdir is its screenshot
	xtightvncviewer      # a stock VNC viewer with a password file, against `desktop --listen`
	caddy                # the TLS front of deploy/caddy, validated and driven in its test
	systemd              # systemd-analyze verifies the units in deploy/systemd
	ca-certificates
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "deps: missing packages ${missing[*]}; run make deps as root" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# Debian's package starts a cluster on 5432; cocoonbox runs its own clusters, so keep the
	# distribution's one from holding the port and memory.
	if systemctl is-active --quiet postgresql 2>/dev/null; then systemctl stop postgresql || true; fi
	# Debian's caddy package serves port 80 as a service; cocoonbox's tests run their own.
	if systemctl is-active --quiet caddy 2>/dev/null; then systemctl disable --now caddy || true; fi
fi

# Box disks are loop-mounted ext4 images: the engine needs the loop driver.
if [[ ! -e /dev/loop-control ]] && [[ $(id -u) -eq 0 ]]; then
	modprobe loop 2>/dev/null || echo "deps: no loop devices (modprobe loop failed); the engine cannot give boxes disks" >&2
fi

if ! command -v go >/dev/null; then
	echo "deps: Go is not installed (want Go 1.26 at /usr/local/go)" >&2
	exit 1
fi

# Go tools, pinned, installed into .bin so they never clash with the machine's.
BIN="$PWD/.bin"
mkdir -p "$BIN"
install_go_tool() { # name module version
	local stamp="$BIN/.$1.version"
	if [[ -x "$BIN/$1" && -f "$stamp" && "$(cat "$stamp")" == "$3" ]]; then return; fi
	echo "deps: go install $2@$3"
	GOBIN="$BIN" GOFLAGS=-mod=mod go install "$2@$3"
	echo "$3" >"$stamp"
}
install_go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
install_go_tool workflowcheck go.temporal.io/sdk/contrib/tools/workflowcheck "$WORKFLOWCHECK_VERSION"
# runsc is pure Go; CGO_ENABLED=0 makes it static, as gVisor's own release builds are.
CGO_ENABLED=0 install_go_tool runsc gvisor.dev/gvisor/runsc "$RUNSC_VERSION"
# A standalone versitygw, so tests can run against an external S3 server chosen by configuration.
# Its version is the one go.mod embeds as a library, so the two never drift.
VERSITYGW_VERSION=$(go list -m -f '{{.Version}}' github.com/versity/versitygw)
install_go_tool versitygw github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION"
