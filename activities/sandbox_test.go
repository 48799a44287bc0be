package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxlink/boxlinktest"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

// memTokens is an in-memory TokenStore.
type memTokens struct {
	mu sync.Mutex
	m  map[string]sandbox.SandboxRef
	// nodes, when set, are the node records a sandbox's Node is found at, as the store finds it:
	// the node's URL, or none for a node without a record.
	nodes []nodes.Node
}

func (t *memTokens) PutSandboxToken(_ context.Context, boxID string, ref sandbox.SandboxRef) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]sandbox.SandboxRef{}
	}
	t.m[boxID] = ref
	return nil
}

func (t *memTokens) SandboxToken(_ context.Context, boxID string) (sandbox.SandboxRef, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ref, ok := t.m[boxID]
	if !ok {
		return sandbox.SandboxRef{}, cocoonbox.Errorf(cocoonbox.ENotFound, "no token")
	}
	for _, n := range t.nodes {
		if ref.Addr == "" && ref.Node == n.ID {
			ref.Addr = n.URL
		}
	}
	return ref, nil
}

// stored is box boxID's sandbox as the token store holds it, before any node is resolved.
func (t *memTokens) stored(boxID string) sandbox.SandboxRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[boxID]
}

func TestSandboxActivities(t *testing.T) {
	const root = "root-token"
	f := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	tokens := &memTokens{}
	a := &Sandbox{Client: f.Client(root), Tokens: tokens, Template: "base"}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	box := cocoonbox.BoxID("bx_0123456789abcdef")

	v, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var claimed ClaimResult
	if err := v.Get(&claimed); err != nil {
		t.Fatal(err)
	}
	if ref, _ := tokens.SandboxToken(context.Background(), string(box)); ref.ID != claimed.SandboxID || ref.Token == "" || ref.Addr != "" {
		t.Fatalf("token store has %+v, want %s and a token", ref, claimed.SandboxID)
	}
	if got := f.LastClaim().ClaimRef; got != "bx_0123456789abcdef/1" {
		t.Fatalf("claim_ref = %q", got)
	}
	// The same attempt again adopts instead of claiming a second sandbox.
	v, err = env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1})
	if err != nil {
		t.Fatalf("claim again: %v", err)
	}
	var again ClaimResult
	_ = v.Get(&again)
	if again.SandboxID != claimed.SandboxID || len(f.Sandboxes()) != 1 {
		t.Fatalf("second claim of attempt 1 got %s, sandboxes %v", again.SandboxID, f.Sandboxes())
	}

	in := SandboxInput{BoxID: box, SandboxID: claimed.SandboxID}
	for _, step := range []struct {
		name string
		fn   any
	}{{"wait", a.WaitReady}, {"hibernate", a.Hibernate}, {"wake", a.Wake}} {
		if _, err := env.ExecuteActivity(step.fn, in); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}

	f.Lose(claimed.SandboxID)
	_, err = env.ExecuteActivity(a.Wake, in)
	requireType(t, err, ErrTypeSandboxGone)
	if _, err := env.ExecuteActivity(a.Release, in); err != nil {
		t.Fatalf("release of a gone sandbox: %v", err)
	}

	_, err = env.ExecuteActivity(a.Claim, ClaimInput{BoxID: "nope", Attempt: 1})
	requireType(t, err, ErrTypeInvalidArgument)
}

func requireType(t *testing.T, err error, typ string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != typ {
		t.Fatalf("error %v, want type %s", err, typ)
	}
}

// TestWaitReadyWritesCredential: once the sandbox answers, WaitReady writes the box's agent
// credential into it through the engine's exec, the credential in the environment, not argv.
// TestRedirectedSandboxStaysAddressed: a sandbox a sandboxd cluster's claim redirected to
// another node is addressed there by every later activity (ready probe, hibernate, wake,
// release) through the node kept with its token. The node used to be dropped, and the calls
// went to the configured engine, which does not have the sandbox.
func TestRedirectedSandboxStaysAddressed(t *testing.T) {
	const root = "root-token"
	origin := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	peer := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	origin.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Redirect: []string{peer.Addr()}})
	tokens := &memTokens{}
	a := &Sandbox{Client: origin.Client(root), Tokens: tokens, Template: "base", PollInterval: 10 * time.Millisecond}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	box := cocoonbox.BoxID("bx_00000000000000d1")
	v, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var claimed ClaimResult
	if err := v.Get(&claimed); err != nil {
		t.Fatal(err)
	}
	if len(peer.Sandboxes()) != 1 || len(origin.Sandboxes()) != 0 {
		t.Fatalf("claimed on the peer %v and the origin %v, want the peer alone", peer.Sandboxes(), origin.Sandboxes())
	}
	in := SandboxInput{BoxID: box, SandboxID: claimed.SandboxID}
	for _, step := range []struct {
		name string
		act  any
	}{{"ready", a.WaitReady}, {"hibernate", a.Hibernate}, {"wake", a.Wake}, {"release", a.Release}} {
		if _, err := env.ExecuteActivity(step.act, in); err != nil {
			t.Fatalf("%s of the redirected sandbox: %v", step.name, err)
		}
	}
	if n := len(peer.Sandboxes()); n != 0 {
		t.Fatalf("the peer still has %d sandboxes after the release", n)
	}
}

// TestClaimPlacedOnNodes: with engine nodes registered, a claim goes to the node placement picks
// (here the one with more free memory, not the worker's own engine), the box's later calls go
// there too, and a retry of the same attempt after placement changed its mind adopts the first
// try's sandbox instead of claiming a second one elsewhere.
func TestClaimPlacedOnNodes(t *testing.T) {
	const root = "root-token"
	own := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	other := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	now := time.Now()
	registered := []nodes.Node{
		{ID: "own", URL: own.URL, State: nodes.Active, MemoryMiB: 4096, CommittedMiB: 3072, HeartbeatAt: now},
		{ID: "other", URL: other.URL, State: nodes.Active, MemoryMiB: 4096, CommittedMiB: 0, HeartbeatAt: now},
	}
	tokens := &memTokens{nodes: registered}
	var placed []string
	a := &Sandbox{Client: own.Client(root), Tokens: tokens, Template: "base", PollInterval: 10 * time.Millisecond,
		Nodes: func(context.Context) ([]nodes.Node, error) { return registered, nil }, Node: "own",
		Placed: func(_ context.Context, node string, mib int64) error {
			placed = append(placed, fmt.Sprintf("%s %d", node, mib))
			return nil
		}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	box := cocoonbox.BoxID("bx_00000000000000d2")
	claim := func() ClaimResult {
		t.Helper()
		v, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 1})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		var res ClaimResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := claim()
	if len(other.Sandboxes()) != 1 || len(own.Sandboxes()) != 0 {
		t.Fatalf("claimed on own %v and other %v, want the node with free memory", own.Sandboxes(), other.Sandboxes())
	}
	// The node's record counts the box at once, for the placements before its next heartbeat.
	if want := fmt.Sprintf("other %d", cocoonbox.SizeSmall.Spec().MemoryMB); len(placed) != 1 || placed[0] != want {
		t.Fatalf("placements counted %q, want %q", placed, want)
	}
	// The box's record names the node; its address comes from the node's record.
	if ref := tokens.stored(string(box)); ref.Node != "other" || ref.Addr != "" {
		t.Fatalf("the box's sandbox is recorded on %q at %q, want node other and no address of its own", ref.Node, ref.Addr)
	}
	if ref, _ := tokens.SandboxToken(context.Background(), string(box)); ref.Addr != other.URL {
		t.Fatalf("the box's sandbox is addressed at %q, want %s", ref.Addr, other.URL)
	}
	if _, err := env.ExecuteActivity(a.Hibernate, SandboxInput{BoxID: box, SandboxID: first.SandboxID}); err != nil {
		t.Fatalf("hibernate on the placed node: %v", err)
	}
	// The retry's placement now prefers its own engine; the first try's sandbox is found anyway.
	registered[0].CommittedMiB, registered[1].CommittedMiB = 0, 3072
	again := claim()
	if again.SandboxID != first.SandboxID || !again.Adopted || len(own.Sandboxes()) != 0 || len(other.Sandboxes()) != 1 {
		t.Fatalf("retry: %+v; own %v, other %v; want the first sandbox adopted", again, own.Sandboxes(), other.Sandboxes())
	}
	if len(placed) != 1 {
		t.Fatalf("an adopted sandbox was counted again: %q", placed)
	}
	// No node has room by the heartbeats: the worker's own engine decides, and has room here.
	registered[0].CommittedMiB, registered[1].CommittedMiB = 4000, 4000
	if _, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 2}); err != nil || len(own.Sandboxes()) != 1 {
		t.Fatalf("claim with no room by the heartbeats: %v; own engine has %v", err, own.Sandboxes())
	}
	// A sandbox on the worker's own engine is recorded on the worker's node, which another
	// worker, whose own engine is another, reaches at the node's address.
	if ref := tokens.stored(string(box)); ref.Node != "own" || ref.Addr != "" {
		t.Fatalf("a sandbox on the own engine is recorded on %q at %q, want node own", ref.Node, ref.Addr)
	}
	// The worker's own node drained: with no room on the others, nothing is claimed, and the
	// refusal says why; a retry of a claim made before the drain still finds its sandbox.
	registered[0].State = nodes.Draining
	_, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 3})
	if err == nil || !strings.Contains(err.Error(), "own is draining") || len(own.Sandboxes()) != 1 {
		t.Fatalf("claim with the own node draining: %v; own engine has %v", err, own.Sandboxes())
	}
	retried, err := env.ExecuteActivity(a.Claim, ClaimInput{BoxID: box, Size: cocoonbox.SizeSmall, Attempt: 2})
	var res ClaimResult
	if err != nil || retried.Get(&res) != nil || !res.Adopted {
		t.Fatalf("retry of a claim made before the drain: %+v, %v; want it adopted", res, err)
	}
}

// TestLostNodesSandboxIsGone: a call on a sandbox whose node does not answer is retried while
// the node may come back, and is SandboxGone once the heartbeats marked the node lost, so the box
// comes back elsewhere from its newest snapshot instead of waiting on a dead host.
func TestLostNodesSandboxIsGone(t *testing.T) {
	const root = "root-token"
	own := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	registered := []nodes.Node{{ID: "node-b", URL: dead, State: nodes.Active, HeartbeatAt: time.Now()}}
	tokens := &memTokens{}
	box := cocoonbox.BoxID("bx_00000000000000d3")
	if err := tokens.PutSandboxToken(context.Background(), string(box), sandbox.SandboxRef{ID: "sb_00000000000000d3", Token: "t", Addr: dead}); err != nil {
		t.Fatal(err)
	}
	a := &Sandbox{Client: own.Client(root), Tokens: tokens, Template: "base",
		Nodes: func(context.Context) ([]nodes.Node, error) { return registered, nil }}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	in := SandboxInput{BoxID: box, SandboxID: "sb_00000000000000d3"}
	_, err = env.ExecuteActivity(a.Wake, in)
	if typ := errorType(err); typ == ErrTypeSandboxGone || err == nil {
		t.Fatalf("wake on a node not answering yet: %v (%s), want an error worth retrying", err, typ)
	}
	registered[0].State = nodes.Lost
	for name, act := range map[string]any{"wake": a.Wake, "hibernate": a.Hibernate} {
		_, err = env.ExecuteActivity(act, in)
		if typ := errorType(err); typ != ErrTypeSandboxGone || !strings.Contains(err.Error(), "node node-b that held it is lost") {
			t.Fatalf("%s on a lost node: %v (%s), want SandboxGone naming the node", name, err, typ)
		}
	}
	_, err = env.ExecuteActivity(a.Renew, RenewInput{BoxID: box, SandboxID: "sb_00000000000000d3"})
	if typ := errorType(err); typ != ErrTypeSandboxGone {
		t.Fatalf("renew on a lost node: %v (%s), want SandboxGone", err, typ)
	}
}

func TestWaitReadyWritesCredential(t *testing.T) {
	box := boxlinktest.New(nil, sbRef)
	a := &Sandbox{Client: box, Tokens: fakeTokens{},
		Credentials: func(id cocoonbox.BoxID) (string, error) { return boxlink.Credential([]byte("key"), id), nil }}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	if _, err := env.ExecuteActivity(a.WaitReady, SandboxInput{BoxID: agentBox, SandboxID: "sb_1"}); err != nil {
		t.Fatal(err)
	}
	want := boxlink.Credential([]byte("key"), agentBox)
	execs := box.Execs()
	if len(execs) != 1 {
		t.Fatalf("execs %+v, want one: the write, which is the probe too", execs)
	}
	w := execs[0]
	if w.Env["COCOONBOX_CRED"] != want || strings.Contains(strings.Join(w.Argv, " "), want) ||
		!strings.Contains(strings.Join(w.Argv, " "), wire.CredentialPath) {
		t.Errorf("credential write %+v", w)
	}
	// Without Credentials only the probe runs.
	a.Credentials = nil
	_, err := env.ExecuteActivity(a.WaitReady, SandboxInput{BoxID: agentBox, SandboxID: "sb_1"})
	if execs := box.Execs(); err != nil || len(execs) != 2 || execs[1].Argv[0] != "true" {
		t.Fatalf("without credentials: %v, execs %+v; want one more, the probe", err, execs)
	}
}

// TestClaimRefBox: only a claim_ref ClaimRef makes names a box, so the reconciler never judges
// a sandbox someone else claimed.
func TestClaimRefBox(t *testing.T) {
	box := cocoonbox.NewBoxID()
	if got, ok := ClaimRefBox(ClaimRef(box, 3)); !ok || got != box {
		t.Errorf("ClaimRefBox(ClaimRef(%s, 3)) = %q, %v", box, got, ok)
	}
	for _, ref := range []string{"", string(box), string(box) + "/0", string(box) + "/x", "other/1", string(box) + "/1/2"} {
		if got, ok := ClaimRefBox(ref); ok {
			t.Errorf("ClaimRefBox(%q) = %q, want not ours", ref, got)
		}
	}
}

// TestLastTry: a claim's refusal is final once the retry policy's next wait (1 s, doubling, at
// most 30 s) would start the next try after the ScheduleToClose deadline; without one, or in a
// local activity, never.
func TestLastTry(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	info := func(attempt int32, stc time.Duration) activity.Info {
		return activity.Info{Attempt: attempt, ScheduledTime: at, ScheduleToCloseTimeout: stc}
	}
	for _, c := range []struct {
		info activity.Info
		now  time.Duration // after the first schedule
		want bool
	}{
		{info(1, 3*time.Second), 1500 * time.Millisecond, false}, // the second try at 2.5 s fits
		{info(1, 3*time.Second), 2100 * time.Millisecond, true},
		{info(3, 40*time.Second), 30 * time.Second, false}, // 4 s to the fourth try: 34 s
		{info(3, 40*time.Second), 37 * time.Second, true},
		{info(20, time.Hour), 59*time.Minute + 45*time.Second, true}, // the wait is capped at 30 s
		{info(20, time.Hour), 58 * time.Minute, false},
		{info(5, 0), 24 * time.Hour, false},
		// The box workflow's quick try, a local activity whose ScheduleToClose is its 5 s: the
		// activity after it waits for capacity.
		{activity.Info{Attempt: 1, ScheduledTime: at, ScheduleToCloseTimeout: 5 * time.Second, IsLocalActivity: true}, 4500 * time.Millisecond, false},
	} {
		if got := lastTry(c.info, at.Add(c.now)); got != c.want {
			t.Errorf("attempt %d, schedule-to-close %v, at %v: %v, want %v", c.info.Attempt, c.info.ScheduleToCloseTimeout, c.now, got, c.want)
		}
	}
}
