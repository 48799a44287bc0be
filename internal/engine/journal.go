package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox"
)

// journal is the usage journal: one JSON line per claim, release, hibernate and wake, appended
// and never rewritten, so usage (who held how much, for how long, awake or asleep) can be
// computed after the fact from the file alone.
type journal struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// usageEntry is one journal line.
type usageEntry struct {
	Time     time.Time `json:"time"`
	Event    string    `json:"event"` // claim, release, hibernate, wake
	ID       string    `json:"id"`
	Template string    `json:"template"`
	Size     string    `json:"size"`
	VCPUs    int       `json:"vcpus"`
	MemoryMB int       `json:"memory_mb"`
	Tenant   string    `json:"tenant,omitempty"`
	ClaimRef string    `json:"claim_ref,omitempty"`
	// Reason: release — request, expired, lost; hibernate — request, idle; wake — request, exec,
	// relay, checkpoint.
	Reason string `json:"reason,omitempty"`
}

func openJournal(path string, now func() time.Time) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open usage journal: %w", err)
	}
	return &journal{f: f, now: now}, nil
}

// write appends one event. A failed write is not the caller's failure — the box changed state
// either way — so it is only counted by the caller's log.
func (j *journal) write(event string, r record, reason string) {
	sz := cocoonbox.Size(r.Key.Size).Spec()
	line, _ := json.Marshal(usageEntry{
		Time: j.now().UTC(), Event: event, ID: r.ID, Template: r.Key.Template, Size: r.Key.Size,
		VCPUs: sz.VCPUs, MemoryMB: sz.MemoryMB, Tenant: r.Tenant, ClaimRef: r.ClaimRef, Reason: reason,
	})
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		_, _ = j.f.Write(append(line, '\n')) // one write per line: O_APPEND keeps lines whole
	}
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
