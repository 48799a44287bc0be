package activities

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
)

// memBoxes is an in-memory BoxStore that keeps the contract the real store keeps: creating an
// ID already there with the same fields succeeds, with other fields it is a conflict, and
// writing to an unknown box is not found. fail, when set, answers every call.
type memBoxes struct {
	mu     sync.Mutex
	boxes  map[cocoonbox.BoxID]cocoonbox.Box
	events []EventInput
	writes int
	fail   error
}

var _ BoxStore = (*memBoxes)(nil)

func (m *memBoxes) CreateBox(_ context.Context, b cocoonbox.Box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if old, ok := m.boxes[b.ID]; ok {
		if old.Owner != b.Owner || old.Name != b.Name || old.Size != b.Size {
			return cocoonbox.Errorf(cocoonbox.EConflict, "box %s exists with other fields", b.ID)
		}
		return nil
	}
	if m.boxes == nil {
		m.boxes = map[cocoonbox.BoxID]cocoonbox.Box{}
	}
	m.boxes[b.ID] = b
	m.writes++
	return nil
}

func (m *memBoxes) SetBoxState(_ context.Context, id cocoonbox.BoxID, state cocoonbox.BoxState, _, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	b, ok := m.boxes[id]
	if !ok {
		return cocoonbox.Errorf(cocoonbox.ENotFound, "box %s", id)
	}
	b.State, b.Reason = state, reason
	m.boxes[id] = b
	m.writes++
	return nil
}

func (m *memBoxes) AppendEvent(_ context.Context, id cocoonbox.BoxID, kind, detail string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.events = append(m.events, EventInput{BoxID: id, Kind: kind, Detail: detail})
	m.writes++
	return nil
}

func (m *memBoxes) SetBoxStateWithEvent(ctx context.Context, id cocoonbox.BoxID, state cocoonbox.BoxState, sandboxID, reason, kind, detail string) error {
	if err := m.SetBoxState(ctx, id, state, sandboxID, reason); err != nil {
		return err
	}
	return m.AppendEvent(ctx, id, kind, detail)
}

func (m *memBoxes) box(id cocoonbox.BoxID) (cocoonbox.Box, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.boxes[id]
	return b, ok
}

// storeEnv runs the store activities over a fresh memBoxes, as a worker would.
func storeEnv(t *testing.T) (*testsuite.TestActivityEnvironment, *Store, *memBoxes) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))))
	env := s.NewTestActivityEnvironment()
	mem := &memBoxes{}
	a := &Store{Boxes: mem}
	env.RegisterActivity(a)
	return env, a, mem
}

// requireAppError checks that err reached the caller as an ApplicationError of type typ.
func requireAppError(t *testing.T, err error, typ string, retryable bool) {
	t.Helper()
	app, ok := errors.AsType[*temporal.ApplicationError](err)
	if !ok {
		t.Fatalf("error %v is not an ApplicationError", err)
	}
	if app.Type() != typ || app.NonRetryable() == retryable {
		t.Fatalf("error type %q non-retryable %v, want %q non-retryable %v", app.Type(), app.NonRetryable(), typ, !retryable)
	}
}

const storeBox = cocoonbox.BoxID("bx_0123456789abcdef")

func recordInput() RecordBoxInput {
	return RecordBoxInput{BoxID: storeBox, Owner: "u1", Name: "dev", Size: cocoonbox.SizeSmall}
}

func TestRecordBox(t *testing.T) {
	t.Run("idempotent", func(t *testing.T) {
		env, a, mem := storeEnv(t)
		for i := range 2 { // a retried activity, or a second create
			if _, err := env.ExecuteActivity(a.RecordBox, recordInput()); err != nil {
				t.Fatalf("record %d: %v", i+1, err)
			}
		}
		b, ok := mem.box(storeBox)
		if !ok {
			t.Fatal("no row")
		}
		want := cocoonbox.Box{ID: storeBox, Owner: "u1", Name: "dev", Size: cocoonbox.SizeSmall, State: cocoonbox.BoxStateCreating}
		if b != want {
			t.Errorf("row = %+v, want %+v", b, want)
		}
		if mem.writes != 1 {
			t.Errorf("%d writes, want 1", mem.writes)
		}
	})
	t.Run("same ID with other fields is a conflict", func(t *testing.T) {
		env, a, _ := storeEnv(t)
		if _, err := env.ExecuteActivity(a.RecordBox, recordInput()); err != nil {
			t.Fatal(err)
		}
		other := recordInput()
		other.Name = "other"
		_, err := env.ExecuteActivity(a.RecordBox, other)
		requireAppError(t, err, ErrTypeConflict, false)
	})
	t.Run("invalid input never reaches the store", func(t *testing.T) {
		env, a, mem := storeEnv(t)
		for _, in := range []RecordBoxInput{
			{BoxID: "nope", Owner: "u1", Name: "dev", Size: cocoonbox.SizeSmall},
			{BoxID: storeBox, Owner: "u1", Name: "", Size: cocoonbox.SizeSmall},
			{BoxID: storeBox, Owner: "u1", Name: "dev", Size: "huge"},
		} {
			_, err := env.ExecuteActivity(a.RecordBox, in)
			requireAppError(t, err, ErrTypeInvalidArgument, false)
		}
		if mem.writes != 0 {
			t.Errorf("%d writes, want 0", mem.writes)
		}
	})
	t.Run("store down is retried", func(t *testing.T) {
		env, a, mem := storeEnv(t)
		mem.fail = cocoonbox.Errorf(cocoonbox.EUnavailable, "db down")
		_, err := env.ExecuteActivity(a.RecordBox, recordInput())
		requireAppError(t, err, ErrTypeUnavailable, true)
	})
}

func TestSetState(t *testing.T) {
	env, a, mem := storeEnv(t)
	if _, err := env.ExecuteActivity(a.RecordBox, recordInput()); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ExecuteActivity(a.SetState, SetStateInput{BoxID: storeBox, State: cocoonbox.BoxStateRunning, SandboxID: "sb-1"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := mem.box(storeBox); b.State != cocoonbox.BoxStateRunning {
		t.Errorf("state = %q, want running", b.State)
	}
	if _, err := env.ExecuteActivity(a.SetState, SetStateInput{BoxID: storeBox, State: cocoonbox.BoxStateFailed, Reason: "engine lost it"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := mem.box(storeBox); b.State != cocoonbox.BoxStateFailed || b.Reason != "engine lost it" {
		t.Errorf("row = %+v, want failed with its reason", b)
	}

	writes := mem.writes
	_, err := env.ExecuteActivity(a.SetState, SetStateInput{BoxID: storeBox, State: "sideways"})
	requireAppError(t, err, ErrTypeInvalidArgument, false)
	if mem.writes != writes {
		t.Error("an unknown state reached the store")
	}
	_, err = env.ExecuteActivity(a.SetState, SetStateInput{BoxID: "bx_ffffffffffffffff", State: cocoonbox.BoxStateRunning})
	requireAppError(t, err, ErrTypeNotFound, false)
}

func TestEvent(t *testing.T) {
	env, a, mem := storeEnv(t)
	in := EventInput{BoxID: storeBox, Kind: "sandbox-replaced", Detail: "sb-1"}
	if _, err := env.ExecuteActivity(a.Event, in); err != nil {
		t.Fatal(err)
	}
	if len(mem.events) != 1 || mem.events[0] != in {
		t.Errorf("events = %+v, want [%+v]", mem.events, in)
	}
	mem.fail = errors.New("connection reset")
	_, err := env.ExecuteActivity(a.Event, in)
	requireAppError(t, err, ErrTypeInternal, true)
}
