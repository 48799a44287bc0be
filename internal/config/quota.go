package config

import "fmt"

// Quota bounds what one user may hold and run at once, so that one account cannot take a
// deployment's capacity from everyone else. Boxes, vCPUs, memory and runs are counted in the
// database and hold across API replicas; execs and streams are counted in each API process.
// A limit of 0 is no limit.
type Quota struct {
	// Boxes bounds a user's boxes that are not deleted, hibernated ones included.
	Boxes int `yaml:"boxes_per_user" env:"COCOONBOX_QUOTA_BOXES"`
	// VCPUs and MemoryMB bound the sum of the sizes of those boxes.
	VCPUs    int `yaml:"vcpus_per_user" env:"COCOONBOX_QUOTA_VCPUS"`
	MemoryMB int `yaml:"memory_mb_per_user" env:"COCOONBOX_QUOTA_MEMORY_MB"`
	// Runs bounds the agent runs a user has started that have not ended.
	Runs int `yaml:"runs_per_user" env:"COCOONBOX_QUOTA_RUNS"`
	// Execs bounds a user's commands and file transfers in flight, per API process.
	Execs int `yaml:"execs_per_user" env:"COCOONBOX_QUOTA_EXECS"`
	// Streams bounds a user's open Watch and WatchRun streams, per API process.
	Streams int `yaml:"streams_per_user" env:"COCOONBOX_QUOTA_STREAMS"`
}

// DefaultQuota is room for ten medium boxes, or two of the largest, with a few agent runs.
func DefaultQuota() Quota {
	return Quota{Boxes: 10, VCPUs: 24, MemoryMB: 32 << 10, Runs: 4, Execs: 16, Streams: 32}
}

// Validate names the first limit that is negative.
func (q *Quota) Validate() error {
	for _, f := range []struct {
		name string
		n    int
	}{
		{"boxes_per_user", q.Boxes}, {"vcpus_per_user", q.VCPUs}, {"memory_mb_per_user", q.MemoryMB},
		{"runs_per_user", q.Runs}, {"execs_per_user", q.Execs}, {"streams_per_user", q.Streams},
	} {
		if f.n < 0 {
			return fmt.Errorf("config quota.%s: must be 0 (no limit) or more, got %d", f.name, f.n)
		}
	}
	return nil
}
