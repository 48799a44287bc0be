package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
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

// HostMemory returns the host's MemTotal from /proc/meminfo.
func HostMemory() (int64, error) {
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

// noCapacity is the claim error at the limit: 429 (no capacity, as the sandbox client reads it)
// with Retry-After, naming the limit so an operator knows which setting to raise.
func noCapacity(limit int) error {
	return newError(kindNoCapacity, "no capacity: this engine runs its max_sandboxes limit of %d sandboxes; retry later", limit)
}

// memoryBudget is the memory the engine's boxes may add up to, by their sizes.
type memoryBudget struct {
	mb         int64   // (host memory - hostReserveBytes) × overcommit, in MiB
	overcommit float64 // as configured, at least 1
}

func newMemoryBudget(hostBytes int64, overcommit float64) memoryBudget {
	if overcommit == 0 {
		overcommit = 1
	}
	left := max(hostBytes-hostReserveBytes, smallBoxBytes)
	return memoryBudget{mb: int64(float64(left>>20) * overcommit), overcommit: overcommit}
}

// sizeMB is the memory of a box of key's size.
func sizeMB(key sandbox.PoolKey) int64 {
	return int64(cocoonbox.Size(key.Size).Spec().MemoryMB)
}

// committedLocked is the memory the sizes of the engine's boxes add up to, in MiB; the caller
// holds e.mu.
func (e *Engine) committedLocked() int64 {
	var committed int64
	for _, b := range e.boxes {
		committed += sizeMB(b.rec.Key)
	}
	return committed
}

// admitLocked refuses a new box of key when the engine is at one of its limits: the count of
// boxes, or the memory their sizes add up to. The caller holds e.mu; a box's key never changes
// after it is made, so reading it needs no box lock.
func (e *Engine) admitLocked(key sandbox.PoolKey) error {
	if len(e.boxes) >= e.maxBoxes {
		return noCapacity(e.maxBoxes)
	}
	committed := e.committedLocked()
	if need := sizeMB(key); committed+need > e.memory.mb {
		return newError(kindNoCapacity, "no capacity: a %s box needs %d MiB and this engine's boxes hold %d of its %d MiB "+
			"(host memory less 1 GiB, times memory_overcommit %g); retry later", key.Size, need, committed, e.memory.mb, e.memory.overcommit)
	}
	return nil
}
