package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
)

// The typed client of the box and agent run workflows: what the API's service and the worker's
// activities use to reach them, so none of them spells an update, a signal or a query by hand.
// Every error is a domain error (DomainError).

// Create starts the box's workflow, if it is not running yet, and sends it the create update in
// one call (Update-with-Start), returning the status once the box runs: a second create of the
// same box finds the workflow and returns its status.
func Create(ctx context.Context, c client.Client, in BoxWorkflowInput) (Status, error) {
	start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       BoxWorkflowID(in.BoxID),
		TaskQueue:                TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    temporal.NewSearchAttributes(in.searchAttributes(cocoonbox.BoxStateCreating)...),
	}, BoxWorkflow, in)
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   UpdateCreate,
			Args:         []any{CreateInput{}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return Status{}, DomainError(fmt.Errorf("create box %s: %w", in.BoxID, err))
	}
	var st Status
	if err := h.Get(ctx, &st); err != nil {
		return Status{}, DomainError(fmt.Errorf("create box %s: %w", in.BoxID, err))
	}
	return st, nil
}

// Revive starts the workflow of a box that Temporal has none of while the box's row says it
// exists (a deployment restored from a backup onto a new Temporal): asleep and without a sandbox,
// so its next wake restores its newest snapshot, or, with none, fails it as lost. in.State, when
// nil, is that. A workflow that started meanwhile is left as it is.
func Revive(ctx context.Context, c client.Client, in BoxWorkflowInput) error {
	if in.State == nil {
		// Attempt 1: a box that had a sandbox once, so a wake without a snapshot says it is
		// lost instead of quietly starting it empty from its template.
		in.State = &BoxCarriedState{State: cocoonbox.BoxStateHibernated, Attempt: 1}
	}
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       BoxWorkflowID(in.BoxID),
		TaskQueue:                TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    temporal.NewSearchAttributes(in.searchAttributes(in.State.State)...),
	}, BoxWorkflow, in)
	if err != nil {
		return DomainError(fmt.Errorf("revive box %s: %w", in.BoxID, err))
	}
	return nil
}

// Missing reports whether err says Temporal has no workflow for the box (none was started, or
// it ended and is gone).
func Missing(err error) bool {
	_, ok := errors.AsType[*serviceerror.NotFound](err)
	return ok
}

// Started reports whether the box's workflow exists (running or closed); false only when Temporal
// says it has none, so an unreachable Temporal returns true with its error.
func Started(ctx context.Context, c client.Client, id cocoonbox.BoxID) (bool, error) {
	_, err := c.DescribeWorkflowExecution(ctx, BoxWorkflowID(id), "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return false, nil
	}
	return true, err
}

// Touch tells the box's workflow it is in use, restarting its idle clock.
func Touch(ctx context.Context, c client.Client, id cocoonbox.BoxID) error {
	return signalBox(ctx, c, id, SignalTouch, struct{}{})
}

// ReportViewers tells the box's workflow how many desktop viewers source has now, control of them
// in control mode.
func ReportViewers(ctx context.Context, c client.Client, id cocoonbox.BoxID, source string, n, control int) error {
	return signalBox(ctx, c, id, SignalViewers, ViewersSignal{Count: n, Source: source, Control: control})
}

// ClaimControl takes the box's control slot for connection conn of API process source, or
// returns a conflict naming why while another connection holds it.
func ClaimControl(ctx context.Context, c client.Client, id cocoonbox.BoxID, source, conn string) error {
	_, err := Update[Status](ctx, c, id, UpdateControlConn, ControlConnInput{ID: conn, Source: source})
	return err
}

// SandboxLost tells the box's workflow that the node holding its sandbox sandboxID is lost.
func SandboxLost(ctx context.Context, c client.Client, id cocoonbox.BoxID, sandboxID, node string) error {
	return signalBox(ctx, c, id, SignalSandboxLost, SandboxLostSignal{SandboxID: sandboxID, Node: node})
}

// ControlClosed gives the box's control slot back from connection conn.
func ControlClosed(ctx context.Context, c client.Client, id cocoonbox.BoxID, conn string) error {
	return signalBox(ctx, c, id, SignalControlClosed, ControlClosedSignal{ID: conn})
}

func signalBox(ctx context.Context, c client.Client, id cocoonbox.BoxID, name string, arg any) error {
	if err := c.SignalWorkflow(ctx, BoxWorkflowID(id), "", name, arg); err != nil {
		return DomainError(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	return nil
}

// StartRun starts agent run in.RunID's workflow.
func StartRun(ctx context.Context, c client.Client, in AgentRunInput) error {
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: AgentRunWorkflowID(in.RunID), TaskQueue: TaskQueue},
		AgentRunWorkflow, in)
	if err != nil {
		return DomainError(fmt.Errorf("start run %s: %w", in.RunID, err))
	}
	return nil
}

// ErrRunEnded is what signalling a run whose workflow has ended returns.
var ErrRunEnded = &cocoonbox.Error{Code: cocoonbox.EConflict, Message: "the run has ended"}

// CancelRun asks the run to stop, by; ErrRunEnded when it has ended.
func CancelRun(ctx context.Context, c client.Client, runID, by string) error {
	return signalRun(ctx, c, runID, SignalRunCancel, RunCancelSignal{By: by})
}

// MessageRun passes text to the run's next step; ErrRunEnded when it has ended.
func MessageRun(ctx context.Context, c client.Client, runID, text string) error {
	return signalRun(ctx, c, runID, SignalRunMessage, RunMessageSignal{Text: text})
}

func signalRun(ctx context.Context, c client.Client, runID, name string, arg any) error {
	err := c.SignalWorkflow(ctx, AgentRunWorkflowID(runID), "", name, arg)
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return fmt.Errorf("%s run %s: %w", name, runID, ErrRunEnded)
	}
	if err != nil {
		return DomainError(fmt.Errorf("%s run %s: %w", name, runID, err))
	}
	return nil
}

// Update sends the update name with arg to the box's workflow, waits for it to complete and
// returns its result. When ctx's deadline comes first, the update goes on in the workflow and
// Update returns in time with why it has not finished: EUnavailable with the failure its
// activity is being retried after ("snapshot store (S3 at …) is not answering; the snapshot
// goes on and is retried"), or, with none, that it is still under way.
func Update[T any](ctx context.Context, c client.Client, id cocoonbox.BoxID, name string, arg any) (T, error) {
	var out T
	wctx, cancel := withAnswerMargin(ctx)
	defer cancel()
	h, err := c.UpdateWorkflow(wctx, client.UpdateWorkflowOptions{
		UpdateID:     updateID(ctx),
		WorkflowID:   BoxWorkflowID(id),
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(wctx, &out)
	}
	if err != nil && ctx.Err() == nil && marginReached(wctx) {
		return out, pendingError(ctx, c, id, name)
	}
	if err != nil {
		return out, DomainError(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	return out, nil
}

// WithUpdateID makes the update Update sends under ctx the update id: sent again with the same
// id (a retried request), it is the same update, done once, and answers its result. Without one
// each call is an update of its own.
func WithUpdateID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, updateIDKey{}, id)
}

type updateIDKey struct{}

// updateID is ctx's update ID (WithUpdateID); "" lets the SDK pick a new one.
func updateID(ctx context.Context) string {
	id, _ := ctx.Value(updateIDKey{}).(string)
	return id
}

// marginReached reports whether ctx, from withAnswerMargin, has run out. Its deadline is checked
// as well as its Err: the SDK's calls under it set timers of their own for the same deadline,
// which may fire, and fail the call, a moment before ctx's own.
func marginReached(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// withAnswerMargin is ctx with its deadline brought forward, so that a call whose wait runs out
// still has time to find out why and say so before the caller stops listening.
func withAnswerMargin(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(dl)/4, time.Second)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// pendingError explains an update that had not finished by the caller's deadline, from the
// failure the box's workflow (or a child of it, such as a snapshot's) is retrying.
func pendingError(ctx context.Context, c client.Client, id cocoonbox.BoxID, name string) error {
	failure, _ := Retrying(ctx, c, id)
	if failure == "" {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable,
			Message: fmt.Sprintf("the %s of box %s has not finished in the time given; it goes on (box show says when it is done)", name, id)}
	}
	return &cocoonbox.Error{Code: cocoonbox.EUnavailable,
		Message: fmt.Sprintf("%s; the %s goes on and is retried", failure, name)}
}

// PendingActivities returns the activities the box's workflow and its running child workflows
// (a snapshot's) have scheduled or started, as Temporal describes them; nil when Temporal
// cannot say now.
func PendingActivities(ctx context.Context, c client.Client, id cocoonbox.BoxID) []*workflowpb.PendingActivityInfo {
	desc, err := c.DescribeWorkflowExecution(ctx, BoxWorkflowID(id), "")
	if err != nil {
		return nil
	}
	pending := desc.GetPendingActivities()
	for _, ch := range desc.GetPendingChildren() {
		if cd, err := c.DescribeWorkflowExecution(ctx, ch.GetWorkflowId(), ch.GetRunId()); err == nil {
			pending = append(pending, cd.GetPendingActivities()...)
		}
	}
	return pending
}

// Retrying is what the box's workflow is trying again: the last failure, in one line, of the
// first pending activity past its first try, and that try's number. "" when nothing is retried
// (or Temporal cannot say now).
func Retrying(ctx context.Context, c client.Client, id cocoonbox.BoxID) (string, int32) {
	for _, pa := range PendingActivities(ctx, c, id) {
		if f := pa.GetLastFailure(); f != nil && f.GetMessage() != "" && pa.GetAttempt() > 1 {
			return reason(errors.New(f.GetMessage())), pa.GetAttempt()
		}
	}
	return "", 0
}

// GetStatus returns the box's status from its workflow's query, which writes no history.
func GetStatus(ctx context.Context, c client.Client, id cocoonbox.BoxID) (Status, error) {
	v, err := c.QueryWorkflow(ctx, BoxWorkflowID(id), "", QueryStatus)
	if err != nil {
		return Status{}, DomainError(fmt.Errorf("get box %s: %w", id, err))
	}
	var st Status
	if err := v.Get(&st); err != nil {
		return Status{}, fmt.Errorf("decode box %s status: %w", id, err)
	}
	return st, nil
}

// Wake wakes the box through its workflow's wake update (a no-op for a running box) and returns
// its status after; reason is what the box's events say woke it.
func Wake(ctx context.Context, c client.Client, id cocoonbox.BoxID, reason string) (Status, error) {
	return Update[Status](ctx, c, id, UpdateWake, WakeInput{Reason: reason})
}

// Awake returns the status of a box that is up, waking it first (for reason) when it is not. It
// asks the query first, since the box is usually up already and a query writes no history.
func Awake(ctx context.Context, c client.Client, id cocoonbox.BoxID, reason string) (Status, error) {
	if st, err := GetStatus(ctx, c, id); err == nil && Up(st.State) {
		return st, nil
	}
	return Wake(ctx, c, id, reason)
}

// Up reports whether a box in state s has a sandbox to use: running, or snapshotting (which a
// box stays usable through).
func Up(s cocoonbox.BoxState) bool {
	return s == cocoonbox.BoxStateRunning || s == cocoonbox.BoxStateSnapshotting
}

// StartAttempts starts best-of-N run in.ID; a second start of the same ID finds the first.
func StartAttempts(ctx context.Context, c client.Client, in AttemptsInput) error {
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: AttemptsWorkflowID(in.ID), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, AttemptsWorkflow, in)
	if err != nil {
		return DomainError(fmt.Errorf("start attempts %s: %w", in.ID, err))
	}
	return nil
}

// AnswerAttempts sends best-of-N run id its user's answer (UpdateAccept with an AcceptInput, or
// UpdateDiscard) and returns where it ended.
func AnswerAttempts(ctx context.Context, c client.Client, id, name string, arg any) (AttemptsStatus, error) {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID: updateID(ctx), WorkflowID: AttemptsWorkflowID(id), UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var st AttemptsStatus
	if err == nil {
		err = h.Get(ctx, &st)
	}
	if err != nil {
		return st, DomainError(fmt.Errorf("%s attempts %s: %w", name, id, err))
	}
	return st, nil
}
