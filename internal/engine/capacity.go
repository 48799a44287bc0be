package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Host memory kept for the host, the engine and the control plane beside it, and the memory of
// the smallest size tier: DefaultMaxSandboxes allows one box per tier of what is left.
const (
	hostReserveBytes = 1 << 30
	smallBoxBytes    = 512 << 20
)

// DefaultMaxSandboxes is the engine's box limit when none is configured: one box per 512 MiB
// (the small tier) of host memory beyond 1 GiB kept for the host, and at least one. Memory is
// what runs out first: a box keeps its memory while it is claimed, busy or not, and a host out
// of memory kills processes of every box alike.
func DefaultMaxSandboxes(memTotalBytes int64) int {
	return max(1, int((memTotalBytes-hostReserveBytes)/smallBoxBytes))
}

// hostMemory returns the host's MemTotal from /proc/meminfo.
func hostMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "MemTotal:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil || kb <= 0 {
				return 0, fmt.Errorf("read host memory: bad MemTotal %q", f[1])
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("read host memory: no MemTotal in /proc/meminfo")
}

// noCapacity is the claim error at the limit: the contract's 503 with Retry-After, naming the
// limit so an operator knows which setting to raise.
func noCapacity(limit int) error {
	return newError(kindUnavailable, "no capacity: this engine runs its max_sandboxes limit of %d sandboxes; retry later", limit)
}
