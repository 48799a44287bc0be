package agentvm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/loomhand/cocoonbox/agentvm/tools"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// DefaultJournalDir is where the agent keeps its journal unless told otherwise.
const DefaultJournalDir = "/var/lib/cocoonbox-agent/journal"

// maxRunIDLen bounds a run ID so that its encoded form fits a file name.
const maxRunIDLen = 128

// Journal records every completed step on disk, keyed by run ID and step number, so that a step
// the control plane retries (its activity timed out, the worker restarted) is answered from the
// record instead of running its tool calls a second time. It is append-only: a recorded step is
// never rewritten. Layout: <dir>/<base64url(run ID)>/<step>.pb, each a StepResponse.
//
// A step under way also has <step>.started, written durably before it runs and removed when it
// fails. A step found started, not recorded and not running in this process was cut off by the
// agent's death (a crash, the OOM killer, a kill): its tool calls may have run in part, so it is
// not run again, and its retry answers ErrInterrupted.
type Journal struct {
	dir string

	mu    sync.Mutex
	locks map[string]*keyLock // one per step being run, so concurrent retries run it once
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// ErrInterrupted is the answer for a step the agent was running when it died: its tool calls may
// have run in part, and running them again could do twice what the user asked for once.
var ErrInterrupted = errors.New("the box's agent restarted while the step ran, so its tool calls may have run in part; it is not run again (start a new run to go on)")

// OpenJournal opens (creating) the journal in dir.
func OpenJournal(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &Journal{dir: dir, locks: map[string]*keyLock{}}, nil
}

func (j *Journal) path(runID string, step int32) string {
	return filepath.Join(j.dir, base64.RawURLEncoding.EncodeToString([]byte(runID)), strconv.Itoa(int(step))+".pb")
}

func (j *Journal) startedPath(runID string, step int32) string {
	return strings.TrimSuffix(j.path(runID, step), ".pb") + ".started"
}

func checkKey(runID string, step int32) error {
	if runID == "" || len(runID) > maxRunIDLen {
		return fmt.Errorf("run_id must be 1 to %d bytes", maxRunIDLen)
	}
	if step < 1 {
		return fmt.Errorf("step must be 1 or more, not %d", step)
	}
	return nil
}

// Lookup returns the recorded response of a completed step, or nil when the step has not
// completed.
func (j *Journal) Lookup(runID string, step int32) (*agentvmv1.StepResponse, error) {
	if err := checkKey(runID, step); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(j.path(runID, step))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	resp := &agentvmv1.StepResponse{}
	if err := proto.Unmarshal(data, resp); err != nil {
		return nil, fmt.Errorf("decode journal %s: %w", j.path(runID, step), err)
	}
	return resp, nil
}

// Record stores a completed step durably (temporary file, fsync, rename, fsync of the
// directory). A step already recorded keeps its first record.
func (j *Journal) Record(runID string, step int32, resp *agentvmv1.StepResponse) error {
	if err := checkKey(runID, step); err != nil {
		return err
	}
	path := j.path(runID, step)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	rec := proto.CloneOf(resp)
	rec.Replayed = false
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	if err := tools.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	return nil
}

// Do returns the recorded response of the step with Replayed set, or runs it with run, records
// its response and returns it. Concurrent calls for one step run it once: the later ones wait and
// get the record. A failed run records nothing, so the step may be tried again.
func (j *Journal) Do(ctx context.Context, runID string, step int32, run func(context.Context) (*agentvmv1.StepResponse, error)) (*agentvmv1.StepResponse, error) {
	if err := checkKey(runID, step); err != nil {
		return nil, err
	}
	key := runID + "\x00" + strconv.Itoa(int(step))
	unlock, err := j.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if resp, err := j.Lookup(runID, step); err != nil || resp != nil {
		if resp != nil {
			resp.Replayed = true
		}
		return resp, err
	}
	// The lock is held: a step started and neither recorded nor failed is not this process's.
	started := j.startedPath(runID, step)
	if _, err := os.Stat(started); err == nil {
		return nil, fmt.Errorf("step %d: %w", step, ErrInterrupted)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(started), 0o700); err != nil {
		return nil, fmt.Errorf("write journal: %w", err)
	}
	if err := tools.WriteFileAtomic(started, nil, 0o600); err != nil {
		return nil, fmt.Errorf("write journal: %w", err)
	}
	resp, err := run(ctx)
	if err != nil {
		// Failed before it did anything lasting, or said so: it may be tried again.
		if rmErr := os.Remove(started); rmErr != nil {
			return nil, errors.Join(err, fmt.Errorf("write journal: %w", rmErr))
		}
		return nil, err
	}
	if err := j.Record(runID, step, resp); err != nil {
		return nil, err
	}
	_ = os.Remove(started) // the record answers from now on; a marker left beside it is harmless
	return resp, nil
}

// lock takes the key's lock, giving up when ctx is done.
func (j *Journal) lock(ctx context.Context, key string) (unlock func(), err error) {
	j.mu.Lock()
	l := j.locks[key]
	if l == nil {
		l = &keyLock{}
		j.locks[key] = l
	}
	l.refs++
	j.mu.Unlock()
	release := func() {
		j.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(j.locks, key)
		}
		j.mu.Unlock()
	}

	got := make(chan struct{})
	go func() { l.mu.Lock(); close(got) }()
	select {
	case <-got:
		return func() { l.mu.Unlock(); release() }, nil
	case <-ctx.Done():
		go func() { <-got; l.mu.Unlock(); release() }()
		return nil, ctx.Err()
	}
}
