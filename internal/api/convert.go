package api

import (
	"cmp"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// ts is t on the wire; the zero time is unset rather than year 1.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// tsp is ts for optional times.
func tsp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return ts(*t)
}

func boxProto(v boxsvc.View) *cbv1.Box {
	return &cbv1.Box{
		Id:           string(v.BoxID),
		Name:         v.Name,
		Owner:        v.Owner,
		Size:         string(v.Size),
		State:        string(v.State),
		LastError:    v.LastError,
		Role:         string(v.Role),
		Viewers:      int32(v.Viewers),
		Pins:         v.Pins,
		IdleDeadline: ts(v.IdleDeadline),
		LastSnapshot: v.LastSnapshot,
		Controller:   v.Controller,
		CreatedAt:    ts(v.CreatedAt),
		Network:      v.Policy.Network.Policy,
		NetworkAllow: v.Policy.Network.Allow,
		Policy:       policyProto(v.Policy),
		Seal:         v.Seal,
		RestoredFrom: restoredProto(v.RestoredFrom),
		Start:        v.Start,
		Waiting:      v.Waiting,
		Parent:       string(v.Parent),
		ForkedAt:     ts(v.ForkedAt),
	}
}

func restoredProto(r workflows.RestoredFrom) *cbv1.RestoredFrom {
	if r.SnapshotID == "" {
		return nil
	}
	return &cbv1.RestoredFrom{SnapshotId: r.SnapshotID, TakenAt: ts(r.TakenAt), At: ts(r.At)}
}

func policyProto(p workflows.Policy) *cbv1.BoxPolicy {
	keep := p.KeepSnapshots
	if keep == 0 {
		keep = workflows.DefaultKeepSnapshots
	}
	return &cbv1.BoxPolicy{IdleSeconds: int64(p.IdleAfter / time.Second), Durable: p.DurableHibernate, KeepSnapshots: int32(keep),
		SnapshotEverySeconds: int64(p.SnapshotEvery / time.Second), LeaseIdleSeconds: int64(cmp.Or(p.LeaseIdle, workflows.DefaultLeaseIdle) / time.Second),
		RecordRuns: p.RecordRuns}
}

func snapshotProto(s cocoonbox.Snapshot) *cbv1.Snapshot {
	return &cbv1.Snapshot{
		Id:        s.ID,
		BoxId:     string(s.BoxID),
		ParentId:  s.ParentID,
		State:     string(s.State),
		Bytes:     s.Bytes,
		Sha256:    s.SHA256,
		Files:     s.Files,
		Pinned:    s.Pinned,
		CreatedAt: ts(s.CreatedAt),
		BaseId:    s.BaseID,
		Depth:     int32(s.Depth),
	}
}

func shareProto(s store.Share) *cbv1.Share {
	return &cbv1.Share{
		BoxId:     string(s.BoxID),
		UserId:    s.UserID,
		UserName:  s.UserName,
		Role:      string(s.Role),
		ExpiresAt: tsp(s.ExpiresAt),
		CreatedAt: ts(s.CreatedAt),
	}
}

func userProto(u store.User) *cbv1.User {
	pu := &cbv1.User{Id: u.ID, Name: u.Name, Admin: u.Admin, CreatedAt: ts(u.CreatedAt)}
	if u.DisabledAt != nil {
		pu.DisabledAt = ts(*u.DisabledAt)
	}
	return pu
}

// tokenProto describes a token; the secret is not part of store.Token and so cannot leak here.
func tokenProto(t store.Token) *cbv1.Token {
	return &cbv1.Token{
		Id:         t.ID,
		Name:       t.Name,
		CreatedAt:  ts(t.CreatedAt),
		LastUsedAt: tsp(t.LastUsedAt),
		ExpiresAt:  tsp(t.ExpiresAt),
		RevokedAt:  tsp(t.RevokedAt),
		Scope:      t.Scope,
	}
}

// secretProto describes a secret; vault.Info carries no value.
func secretProto(i vault.Info) *cbv1.Secret {
	return &cbv1.Secret{Name: i.Name, CreatedAt: ts(i.CreatedAt), UpdatedAt: ts(i.UpdatedAt)}
}

// runProto is a run with the steps it carries (GetRun's; none elsewhere).
func runProto(r boxsvc.Run) *cbv1.AgentRun {
	out := &cbv1.AgentRun{
		Id: r.ID, BoxId: string(r.BoxID), Owner: r.Owner, Model: r.Model, Provider: r.Provider,
		State: string(r.State), Task: r.Task, Error: runError(r.AgentRun), Steps: protoList(r.Steps, stepProto),
		StepsDone: int32(r.StepsDone), Result: r.Result, CreatedAt: ts(r.CreatedAt), EndedAt: ts(r.EndedAt),
		MaxTokens: r.MaxTokens, TokensUsed: r.TokensUsed, Question: question(r.AgentRun),
		Plan: protoList(r.Plan, planProto),
	}
	for _, st := range out.Steps {
		c := r.StepCosts[int(st.GetNumber())]
		st.Tokens, st.CostUsd = c.Tokens, c.CostUSD
	}
	if r.Recording != nil {
		out.Recording = recordingProto(*r.Recording)
	}
	return out
}

func planProto(it store.PlanItem) *cbv1.PlanItem {
	return &cbv1.PlanItem{Text: it.Text, Status: it.Status}
}

// runError is why a run failed or waits on a person, from its row; a question is not an error.
func runError(r store.AgentRun) string {
	if r.State == cocoonbox.AgentRunWaitingForUser {
		return ""
	}
	return r.Error
}

// question is what a run waiting for its starter's answer asked; the row keeps it as the
// waiting state's reason.
func question(r store.AgentRun) string {
	if r.State == cocoonbox.AgentRunWaitingForUser {
		return r.Error
	}
	return ""
}

func stepProto(s store.AgentStep) *cbv1.AgentStep {
	rec := s.Record()
	out := &cbv1.AgentStep{
		Number: int32(s.Step), Kind: s.Kind, Summary: s.Summary, At: ts(s.At),
		Text: rec.Text, Message: rec.Message, Done: rec.Done, StopReason: rec.StopReason, Replayed: rec.Replayed,
		Question: rec.Question, Plan: protoList(rec.Plan, planProto),
	}
	for _, tc := range rec.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &cbv1.AgentToolCall{Name: tc.Name, IsError: tc.IsError, Result: tc.Result, Images: tc.Images})
	}
	return out
}

// runEventProto is one WatchRun event on the wire.
func runEventProto(e boxsvc.RunEvent) *cbv1.WatchRunEvent {
	if e.Step != nil {
		return &cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Step{Step: stepProto(*e.Step)}}
	}
	if e.Text != nil {
		return &cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Text{Text: &cbv1.AgentText{Step: int32(e.Text.Step), Text: e.Text.Text}}}
	}
	return &cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Run{Run: runProto(*e.Run)}}
}

// protoList converts a slice with f.
func protoList[T, P any](in []T, f func(T) P) []P {
	out := make([]P, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
