package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cgroupRoot is where the cgroup hierarchies are mounted; tests may point it elsewhere.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupV2 reports whether the host runs the unified hierarchy only. Hybrid hosts (cgroup v1
// controllers with an empty v2 tree beside them, as here) count as v1: the memory controller
// is where the limits are.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroupDir is the directory of controller's cgroup at path (relative to the hierarchy root).
func cgroupDir(controller, path string) string {
	if cgroupV2() {
		return filepath.Join(cgroupRoot, path)
	}
	return filepath.Join(cgroupRoot, controller, path)
}

// cgroupMemory returns the memory a cgroup uses, the way docker stats counts it: usage less
// the inactive file cache, so image pages read once and easily dropped do not count. A cgroup
// that does not exist (the box is not running) uses nothing.
func cgroupMemory(path string) (int64, error) {
	dir := cgroupDir("memory", path)
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if cgroupV2() {
		usageFile, inactiveKey = "memory.current", "inactive_file"
	}
	b, err := os.ReadFile(filepath.Join(dir, usageFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read memory use: %w", err)
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read memory use: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return usage, nil
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == inactiveKey {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n < usage {
				usage -= n
			}
			break
		}
	}
	return usage, nil
}

// createCgroup makes the process runtime's cgroup for a box with its limits, and returns the
// files to write the init's PID into. runsc does this itself for gVisor boxes.
func createCgroup(path string, vcpus, memoryMB int) ([]string, error) {
	type setting struct{ controller, file, value string }
	var settings []setting
	quota := strconv.Itoa(vcpus * cpuPeriod)
	mem := strconv.FormatInt(int64(memoryMB)<<20, 10)
	if cgroupV2() {
		settings = []setting{
			{"", "memory.max", mem},
			{"", "cpu.max", quota + " " + strconv.Itoa(cpuPeriod)},
		}
	} else {
		settings = []setting{
			{"memory", "memory.limit_in_bytes", mem},
			{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
			{"cpu", "cpu.cfs_quota_us", quota},
		}
	}
	if !cgroupV2() {
		// The freezer holds the box still while Snapshot copies its disk; it has no setting.
		settings = append(settings, setting{"freezer", "", ""})
	}
	var procs []string
	seen := map[string]bool{}
	for _, s := range settings {
		dir := cgroupDir(s.controller, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		if s.file != "" {
			if err := os.WriteFile(filepath.Join(dir, s.file), []byte(s.value), 0o644); err != nil {
				return nil, fmt.Errorf("set cgroup %s: %w", s.file, err)
			}
		}
		if !seen[dir] {
			seen[dir] = true
			procs = append(procs, filepath.Join(dir, "cgroup.procs"))
		}
	}
	return procs, nil
}

// removeCgroup removes the process runtime's cgroup of a box; its processes must be gone.
func removeCgroup(path string) {
	for _, c := range []string{"memory", "cpu", "freezer"} {
		_ = os.Remove(cgroupDir(c, path))
	}
}

// errNoFreezer: the box's cgroup has no freezer (a box started before the freezer was used).
var errNoFreezer = errors.New("the box's cgroup has no freezer")

// freezer names the cgroup at path's freeze control: its directory and file, and the values
// that freeze and thaw it (v1's freezer controller, or v2's cgroup.freeze).
func freezer(path string) (dir, file, frozen, thawed string) {
	if cgroupV2() {
		return cgroupDir("", path), "cgroup.freeze", "1", "0"
	}
	return cgroupDir("freezer", path), "freezer.state", "FROZEN", "THAWED"
}

// freezeCgroup stops every process of the cgroup at path and waits until the kernel says they
// are stopped, so nothing in the box can change its disk; thaw lets them go on. It is how the
// process runtime freezes a box for a snapshot, as runsc pause does for gVisor.
func freezeCgroup(path string) (thaw func() error, err error) {
	dir, file, frozen, _ := freezer(path)
	if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
		return nil, errNoFreezer
	}
	thaw = func() error { return thawCgroup(path) }
	if err := os.WriteFile(filepath.Join(dir, file), []byte(frozen), 0o644); err != nil {
		return nil, fmt.Errorf("freeze box: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if isFrozen(dir) {
			return thaw, nil
		}
		if time.Now().After(deadline) {
			_ = thaw()
			return nil, errors.New("freeze box: its processes did not stop within 10s")
		}
	}
}

// isFrozen reports whether the kernel has stopped every process of the cgroup at dir: v1's
// freezer.state reads FROZEN (FREEZING while some still run), v2's cgroup.events says frozen 1.
func isFrozen(dir string) bool {
	if cgroupV2() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		return err == nil && slices.Contains(strings.Split(string(b), "\n"), "frozen 1")
	}
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
}

// thawCgroup lets a cgroup's processes go on, also one stuck freezing; thawing one that is not
// frozen, or has no freezer, changes nothing. An engine that died during a snapshot's copy left
// its box frozen.
func thawCgroup(path string) error {
	dir, file, _, thawed := freezer(path)
	if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
		return nil // no freezer: nothing froze it
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(thawed), 0o644); err != nil {
		return fmt.Errorf("thaw box: %w", err)
	}
	return nil
}
