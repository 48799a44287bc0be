package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// Replays over plain HTTP, for the web app's player: GET /v1/runs/{id}/recording is the
// recording with its markers (JSON), GET /v1/runs/{id}/recording/{seq} its chunk seq (gzip, as
// stored: the browser inflates it). The bearer token is checked as for GetRun, and the run's box
// as for it: viewer.

// replayJSON is the recording as the player reads it.
type replayJSON struct {
	RunID     string          `json:"run_id"`
	BoxID     cocoonbox.BoxID `json:"box_id"`
	StartedAt time.Time       `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
	Chunks    int             `json:"chunks"`
	Bytes     int64           `json:"bytes"`
	Markers   any             `json:"markers"`
}

func (s *Server) serveReplay(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pr, err := s.authorize(ctx, httpBearer(r), "/cocoonbox.v1.AgentService/GetRun")
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	if s.boxes == nil {
		s.writeHTTPError(w, r, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes"))
		return
	}
	runID := r.PathValue("id")
	if seq := r.PathValue("seq"); seq != "" {
		n, err := strconv.Atoi(seq)
		if err != nil {
			s.writeHTTPError(w, r, cocoonbox.Invalid("chunk", fmt.Sprintf("must be a number, got %q", seq)))
			return
		}
		body, err := s.boxes.ReplayChunk(ctx, pr.User.ID, runID, n)
		if err != nil {
			s.writeHTTPError(w, r, err)
			return
		}
		defer func() { _ = body.Close() }()
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("Cache-Control", "private, max-age=86400") // a chunk never changes once written
		_, _ = io.Copy(w, body)
		return
	}
	rp, err := s.boxes.GetReplay(ctx, pr.User.ID, runID)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(replayJSON{RunID: rp.RunID, BoxID: rp.BoxID, StartedAt: rp.StartedAt, EndedAt: rp.Ended,
		Chunks: rp.Chunks, Bytes: rp.Bytes, Markers: rp.Markers})
}

// ListRecordings lists the recorded runs of the box (viewer).
func (a *agentService) ListRecordings(ctx context.Context, req *cbv1.ListRecordingsRequest) (*cbv1.ListRecordingsResponse, error) {
	svc, caller, id, err := a.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	recs, err := svc.ListRecordings(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	out := &cbv1.ListRecordingsResponse{}
	for _, r := range recs {
		out.Recordings = append(out.Recordings, recordingProto(r))
	}
	return out, nil
}

func recordingProto(r store.Recording) *cbv1.Recording {
	return &cbv1.Recording{RunId: r.RunID, BoxId: string(r.BoxID), StartedAt: ts(r.StartedAt), EndedAt: tsp(r.Ended),
		Chunks: int32(r.Chunks), Bytes: r.Bytes}
}
