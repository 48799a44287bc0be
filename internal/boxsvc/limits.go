package boxsvc

import (
	"sync"

	"github.com/loomhand/cocoonbox"
)

// Names of the per-process limits, as their errors name them.
const (
	limitExecs   = "concurrent execs per user"
	limitStreams = "concurrent streams per user"
)

// inflight counts what each user has in flight in this API process, for the limits that need
// not hold across replicas (execs, streams): each replica bounds its own share, and a client
// spreading calls over replicas gets at most the limit from each. Its zero value is ready.
type inflight struct {
	mu sync.Mutex
	n  map[string]int
}

// take counts one more for user under limit (0: no limit) and returns its release, which may be
// called more than once; at the limit it returns resource_exhausted naming name and the limit.
func (f *inflight) take(user string, limit int, name string) (release func(), err error) {
	if limit <= 0 {
		return func() {}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[user] >= limit {
		return nil, cocoonbox.QuotaReached(name, limit)
	}
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n[user]--; f.n[user] <= 0 {
				delete(f.n, user)
			}
		})
	}, nil
}
