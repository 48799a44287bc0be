package boxsvc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxlink/boxlinktest"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	"github.com/loomhand/cocoonbox/workflows"
)

// statusTemporal stands in for the box workflows: the status query returns the status a test
// set, signals (touch, viewers) are counted; anything else would panic, so a test that passes
// shows the service did not start, update or wake a workflow.
type statusTemporal struct {
	client.Client

	mu      sync.Mutex
	status  map[string]workflows.Status // by workflow ID
	signals map[string]int              // by signal name
	queries int
	// starts says whether ExecuteWorkflow starts a workflow (its status is then the input's
	// carried state and policy) or fails unavailable; started holds the inputs it started.
	starts  bool
	started []workflows.BoxWorkflowInput
	// ended are workflows Temporal still has but that ended: described, but no query or update
	// reaches them (as the workflow's absence from status says).
	ended map[string]bool
}

func (f *statusTemporal) DescribeWorkflowExecution(_ context.Context, workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.status[workflowID]; ok || f.ended[workflowID] {
		return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
	}
	return nil, serviceerror.NewNotFound(fmt.Sprintf("workflow %s not found", workflowID))
}

func (f *statusTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.starts {
		return nil, serviceerror.NewUnavailable("this Temporal starts no workflows")
	}
	in := args[0].(workflows.BoxWorkflowInput)
	f.started = append(f.started, in)
	f.status[opts.ID] = workflows.Status{BoxID: in.BoxID, State: in.State.State, Policy: in.Policy}
	return nil, nil
}

func (f *statusTemporal) set(st workflows.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status[workflows.BoxWorkflowID(st.BoxID)] = st
}

func (f *statusTemporal) QueryWorkflow(_ context.Context, workflowID, _, queryType string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	st, ok := f.status[workflowID]
	f.queries++
	f.mu.Unlock()
	if !ok || queryType != workflows.QueryStatus {
		return nil, serviceerror.NewNotFound(fmt.Sprintf("workflow %s not found", workflowID))
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(st)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

func (f *statusTemporal) queried() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries
}

func (f *statusTemporal) SignalWorkflow(_ context.Context, _, _, signalName string, _ any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals[signalName]++
	return nil
}

// sandboxTokens is the box's current sandbox, as the store would return it.
type sandboxTokens map[string]sandbox.SandboxRef

func (m sandboxTokens) SandboxToken(_ context.Context, boxID string) (sandbox.SandboxRef, error) {
	ref, ok := m[boxID]
	if !ok {
		return sandbox.SandboxRef{}, store.ErrNotFound
	}
	return ref, nil
}

// boxEnv is a running box owned by ann and shared with ada (admin), dan (driver) and vic
// (viewer), and a stranger sam: its sandbox is sandboxtest's (exec runs real commands), its
// agent agentvmtest's, reached through boxlink as in production.
type boxEnv struct {
	st       *store.Store
	svc      *boxsvc.Service
	box      cocoonbox.BoxID
	users    map[cocoonbox.Role]string // owner, admin, driver, viewer
	stranger string
	names    map[string]string // user ID → name
	engine   *sandboxtest.Fake
	ref      sandbox.SandboxRef
	sandbox  *boxlinktest.Box
	agent    *agentvmtest.Agent
	temporal *statusTemporal
}

func newBoxEnv(t *testing.T) boxEnv {
	t.Helper()
	ctx := context.Background()
	st := storetest.New(t)
	e := boxEnv{st: st, box: cocoonbox.NewBoxID(), users: map[cocoonbox.Role]string{}, names: map[string]string{}}
	user := func(name string) string {
		u, err := st.CreateUser(ctx, store.NewUser{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		e.names[u.ID] = name
		return u.ID
	}
	e.users[cocoonbox.RoleOwner] = user("ann")
	if _, err := st.CreateBox(ctx, store.NewBox{ID: e.box, Owner: e.users[cocoonbox.RoleOwner], Name: "dev", Size: cocoonbox.DefaultSize}); err != nil {
		t.Fatal(err)
	}
	for role, name := range map[cocoonbox.Role]string{cocoonbox.RoleAdmin: "ada", cocoonbox.RoleDriver: "dan", cocoonbox.RoleViewer: "vic"} {
		e.users[role] = user(name)
		if _, err := st.PutShare(ctx, e.box, e.users[role], role, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.stranger = user("sam")

	e.engine = sandboxtest.New(t, sandboxtest.Options{})
	engine := e.engine.Client("")
	claimed, err := engine.Claim(ctx, sandbox.ClaimRequest{Template: "base", ClaimRef: string(e.box)})
	if err != nil {
		t.Fatal(err)
	}
	e.ref = claimed.SandboxRef
	key := []byte("agent-credential-key")
	e.agent = agentvmtest.New(t, agentvmtest.Options{Credential: boxlink.Credential(key, e.box)})
	e.sandbox = boxlinktest.New(e.agent, e.ref)
	e.sandbox.Client = engine
	e.temporal = &statusTemporal{status: map[string]workflows.Status{}, signals: map[string]int{}}
	e.temporal.set(workflows.Status{BoxID: e.box, State: cocoonbox.BoxStateRunning, SandboxID: e.ref.ID})
	e.svc = &boxsvc.Service{Store: st, Temporal: e.temporal, Link: &boxlink.Link{
		Sandbox:     e.sandbox,
		Tokens:      sandboxTokens{string(e.box): e.ref},
		Credentials: func(id cocoonbox.BoxID) (string, error) { return boxlink.Credential(key, id), nil },
	}}
	return e
}

// exec runs a command in the box as its owner, failing the test on an error.
func (e boxEnv) exec(t *testing.T, argv ...string) boxsvc.ExecResult {
	t.Helper()
	res, err := e.svc.Exec(context.Background(), e.users[cocoonbox.RoleOwner], e.box, boxsvc.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res
}

// wantError fails the test unless err has code, field and message.
func wantError(t *testing.T, what string, err error, code, field, msg string) {
	t.Helper()
	var e *cocoonbox.Error
	if !errors.As(err, &e) || e.Code != code || e.Field != field || cocoonbox.ErrorMessage(err) != msg {
		t.Errorf("%s: %v (code %q, field %q); want %s %q naming field %q", what, err, cocoonbox.ErrorCode(err), cocoonbox.ErrorField(err), code, msg, field)
	}
}
