package devstack_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// BenchmarkDensity: what an idle desktop box holds, and so how many fit on this machine. Its
// figures: IdleDesktop, the memory the engine measures for a running medium desktop box once XFCE
// is up and idle; Hibernated, the resident memory of every host process of that box once it is
// hibernated and they have had a few seconds to exit (the target is none); FitByIdle, the boxes of
// that idle size the host's memory less 1 GiB holds; Admitted, the medium boxes the engine admits
// without overcommit (its count and memory limits): the ratio of the two is the memory_overcommit
// an operator of idle desktops could set.
func BenchmarkDensity(b *testing.B) {
	e := newDesktopBench(b)
	host, err := engine.HostMemory()
	if err != nil {
		b.Fatal(err)
	}
	ref, err := e.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	var idle []float64
	b.Run("IdleDesktop", func(b *testing.B) {
		for b.Loop() {
			st, err := e.eng.Stats(e.ctx, ref.ID)
			if err != nil || !st.MemUsedMeasured {
				b.Fatalf("stats: %+v, %v", st, err)
			}
			idle = append(idle, float64(st.MemUsedBytes)/(1<<20))
		}
		benchreport.MiB(b, idle)
	})
	if rss := processRSS(b, ref.ID); rss == 0 {
		b.Fatalf("no host process of the running box %s found: the hibernated figure would mean nothing", ref.ID)
	}
	if v, err := e.d.Boxes.Hibernate(e.ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		b.Fatalf("hibernate: %+v, %v", v.State, err)
	}
	// The hibernate returns once runsc has checkpointed the box; its processes may take a moment
	// more to exit. What a hibernated box holds is what stays once they have: a process still
	// there after this wait is measured.
	_ = testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		if processRSS(b, ref.ID) > 0 {
			return errors.New("the box's runsc processes are still exiting")
		}
		return nil
	})
	b.Run("Hibernated", func(b *testing.B) {
		var held []float64
		for b.Loop() {
			held = append(held, float64(processRSS(b, ref.ID))/(1<<20))
		}
		benchreport.MiB(b, held)
	})
	b.Run("FitByIdle", func(b *testing.B) {
		p50 := median(idle)
		var n []float64
		for b.Loop() {
			n = append(n, float64(int((float64(host)/(1<<20)-1024)/p50)))
		}
		benchreport.Count(b, n, "boxes")
	})
	b.Run("Admitted", func(b *testing.B) {
		mb := int64(cocoonbox.SizeMedium.Spec().MemoryMB)
		var n []float64
		for b.Loop() {
			n = append(n, float64(min(int64(engine.DefaultMaxSandboxes(host)), (host>>20-1024)/mb)))
		}
		benchreport.Count(b, n, "boxes")
	})
}

// median is the middle of samples.
func median(samples []float64) float64 {
	s := slices.Sorted(slices.Values(samples))
	return s[len(s)/2]
}

// processRSS sums the resident memory of the host processes that hold the box of sandbox id: its
// runsc sandbox (the box's kernel and processes) and gofer. The engine's own short-lived work on
// the box (runsc state, the disk copy of a seal) names it too, but holds nothing once done.
func processRSS(b *testing.B, id string) int64 {
	b.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, dir := range dirs {
		cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte(id)) ||
			!bytes.HasPrefix(cmd, []byte("runsc-sandbox")) && !bytes.HasPrefix(cmd, []byte("runsc-gofer")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue // gone meanwhile
		}
		sc := bufio.NewScanner(bytes.NewReader(status))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}
