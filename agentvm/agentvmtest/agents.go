package agentvmtest

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// maxRunIDLen is agentvm's bound on a run ID.
const maxRunIDLen = 128

// Lease is the desktop's control lease as the agent was last told it.
type Lease struct {
	Held bool
	Seq  int64
}

// agents is the Agents service.
type agents struct {
	agentvmv1.UnimplementedAgentsServer
	a *Agent
}

// Step runs a step once, as agentvm's journal does: a step already completed is answered from
// the journal with Replayed set, a retry of a step still running waits for it, and a failed step
// records nothing, so it may be tried again. The step runs detached from the call, so a caller
// that gives up does not interrupt it; Cancel of its run does. A step that runs sets the lease
// from the request (desktop_input_refused, lease_seq) by the lease rule (see SetDesktopLease).
func (s agents) Step(ctx context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	switch {
	case req.GetRunId() == "" || len(req.GetRunId()) > maxRunIDLen:
		return nil, status.Errorf(codes.InvalidArgument, "run_id must be 1 to %d bytes", maxRunIDLen)
	case req.GetStep() < 1:
		return nil, status.Errorf(codes.InvalidArgument, "step must be 1 or more, not %d", req.GetStep())
	}
	a, key := s.a, stepKey{req.GetRunId(), req.GetStep()}
	a.mu.Lock()
	a.steps = append(a.steps, proto.CloneOf(req))
	for {
		if rec, ok := a.journal[key]; ok {
			a.mu.Unlock()
			resp := proto.CloneOf(rec)
			resp.Replayed = true
			return resp, nil
		}
		first, ok := a.inflight[key]
		if !ok {
			break
		}
		a.mu.Unlock()
		select {
		case <-first:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		a.mu.Lock()
	}
	ended := make(chan struct{})
	stepCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.inflight[key], a.running[key] = ended, cancel
	a.setLease(req.GetDesktopInputRefused(), req.GetLeaseSeq())
	a.mu.Unlock()

	run := a.opts.Step
	if run == nil {
		run = defaultStep
	}
	type result struct {
		resp *agentvmv1.StepResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		resp, err := run(stepCtx, req)
		switch {
		case err != nil && stepCtx.Err() != nil:
			err = status.FromContextError(stepCtx.Err()).Err()
		case err != nil:
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.Internal, err.Error())
			}
		case resp == nil:
			resp = &agentvmv1.StepResponse{}
		}
		a.mu.Lock()
		if err == nil {
			rec := proto.CloneOf(resp)
			rec.Replayed = false
			a.journal[key] = rec
		}
		delete(a.inflight, key)
		delete(a.running, key)
		close(ended)
		a.mu.Unlock()
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		resp := proto.CloneOf(r.resp)
		resp.Replayed = false
		return resp, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// defaultStep ends the run at once, saying its task (or the user's message) back.
func defaultStep(_ context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	text := req.GetTask()
	if req.GetMessage() != "" {
		text = req.GetMessage()
	}
	msgs := append(append([]byte(nil), req.GetMessages()...), fmt.Sprintf("%s\n", text)...)
	return &agentvmv1.StepResponse{Messages: msgs, Done: true, Text: text, StopReason: "stop"}, nil
}

// Cancel stops the run's steps in progress, remembering the run; cancelled says whether one was.
func (s agents) Cancel(_ context.Context, req *agentvmv1.CancelRequest) (*agentvmv1.CancelResponse, error) {
	if req.GetRunId() == "" {
		return nil, status.Error(codes.InvalidArgument, "run_id is required")
	}
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancels = append(a.cancels, req.GetRunId())
	n := 0
	for key, cancel := range a.running {
		if key.run == req.GetRunId() {
			cancel()
			n++
		}
	}
	return &agentvmv1.CancelResponse{Cancelled: n > 0}, nil
}

// SetDesktopLease applies the lease by agentvm's rule (Loop.SetDesktopHeld): a word with a lower
// sequence than one already applied is ignored; seq 0 applies while no ordered word came.
func (s agents) SetDesktopLease(_ context.Context, req *agentvmv1.SetDesktopLeaseRequest) (*agentvmv1.SetDesktopLeaseResponse, error) {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	s.a.setLease(req.GetHeld(), req.GetLeaseSeq())
	return &agentvmv1.SetDesktopLeaseResponse{}, nil
}

// setLease is the lease rule; a.mu is held.
func (a *Agent) setLease(held bool, seq int64) {
	if seq >= a.lease.Seq {
		a.lease = Lease{Held: held, Seq: seq}
	}
}

// Steps returns the step requests the agent received, retries and replays included, in order.
func (a *Agent) Steps() []*agentvmv1.StepRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*agentvmv1.StepRequest, len(a.steps))
	for i, r := range a.steps {
		out[i] = proto.CloneOf(r)
	}
	return out
}

// Recorded returns the journal's record of a completed step, or nil.
func (a *Agent) Recorded(runID string, step int32) *agentvmv1.StepResponse {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rec, ok := a.journal[stepKey{runID, step}]; ok {
		return proto.CloneOf(rec)
	}
	return nil
}

// Cancels returns the runs Cancel was called for, in order.
func (a *Agent) Cancels() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.cancels...)
}

// Lease returns the desktop's control lease as the agent holds it now.
func (a *Agent) Lease() Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease
}
