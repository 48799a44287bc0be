package boxsvc

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Replay is a run's recording as a player needs it: its chunks and the moments to seek to.
type Replay struct {
	store.Recording
	Markers []Marker
}

// Marker is a moment of a recording: the end of a step ("step", with its number), a person
// taking over the desktop or handing it back ("takeover", "handback"). At is milliseconds since
// the recording's start.
type Marker struct {
	At    int64  `json:"at_ms"`
	Kind  string `json:"kind"`
	Step  int    `json:"step,omitempty"`
	Label string `json:"label"`
}

// controlMarks are the box events a replay marks, by action, with their labels.
var controlMarks = map[string]string{"takeover": "taken over", "handback": "handed back"}

// ListRecordings lists the recordings of the box's runs, newest first (viewer).
func (s *Service) ListRecordings(ctx context.Context, caller string, id cocoonbox.BoxID) ([]store.Recording, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	return s.Store.BoxRecordings(ctx, id)
}

// GetReplay returns a run's recording with its markers (viewer on the run's box): each step's
// end, and each take-over and hand-back of the desktop while it recorded.
func (s *Service) GetReplay(ctx context.Context, caller, runID string) (Replay, error) {
	run, err := s.run(ctx, caller, runID, cocoonbox.RoleViewer)
	if err != nil {
		return Replay{}, err
	}
	rec, err := s.Store.RecordingOfRun(ctx, runID)
	if err != nil {
		return Replay{}, err
	}
	steps, err := s.Store.AgentSteps(ctx, runID)
	if err != nil {
		return Replay{}, fmt.Errorf("read run steps: %w", err)
	}
	out := Replay{Recording: rec}
	since := func(t time.Time) int64 { return max(t.Sub(rec.StartedAt).Milliseconds(), 0) }
	for _, st := range steps {
		out.Markers = append(out.Markers, Marker{At: since(st.At), Kind: "step", Step: st.Step, Label: fmt.Sprintf("step %d", st.Step)})
	}
	events, err := s.Store.BoxEvents(ctx, string(run.BoxID), 0, MaxEvents)
	if err != nil {
		return Replay{}, err
	}
	end := time.Now()
	if rec.Ended != nil {
		end = *rec.Ended
	}
	for _, e := range events {
		kind, _ := strings.CutPrefix(e.Action, "box.")
		if label, ok := controlMarks[kind]; ok && !e.At.Before(rec.StartedAt) && !e.At.After(end) {
			out.Markers = append(out.Markers, Marker{At: since(e.At), Kind: kind, Label: label})
		}
	}
	slices.SortStableFunc(out.Markers, func(a, b Marker) int { return int(a.At - b.At) })
	return out, nil
}

// ReplayChunk streams chunk seq of a run's recording (viewer on the run's box).
func (s *Service) ReplayChunk(ctx context.Context, caller, runID string, seq int) (io.ReadCloser, error) {
	if s.Recordings == nil {
		return nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "recordings are not configured on this API: its configuration needs s3")
	}
	if _, err := s.run(ctx, caller, runID, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	rec, err := s.Store.RecordingOfRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	if seq < 0 || seq >= rec.Chunks {
		return nil, cocoonbox.Invalid("chunk", fmt.Sprintf("must be from 0 to %d, got %d", rec.Chunks-1, seq))
	}
	return s.Recordings.Get(ctx, objstore.RecordingKey(runID, seq))
}
