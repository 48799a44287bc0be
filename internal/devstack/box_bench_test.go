package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// Box benchmarks: create (warm pool), wake and hibernate end to end through the box workflow
// (boxsvc → Temporal update → worker → activities → engine), each beside the raw figure of the
// same engine operation called with the sandbox client directly, on the same kind of dev stack in
// the same run. The ratio is the orchestration overhead.

const (
	// boxBenchWait bounds the stack's start, the sandbox client's calls and every untimed wait.
	boxBenchWait = 2 * time.Minute
	// boxBenchRun bounds a whole benchmark, so a stuck operation fails it rather than hanging.
	boxBenchRun = 5 * time.Minute
	// boxBenchPause is how long a box sits, untimed, between a hibernate or wake and the next timed
	// step, as the engine benchmarks do, so runsc is not still settling from the previous one.
	boxBenchPause = 250 * time.Millisecond
)

// boxBench is a dev stack with the admin user and a root sandbox client on its engine.
type boxBench struct {
	d     *devstack.Dev
	owner string
	eng   *sandbox.HTTP
	ctx   context.Context // the whole benchmark's, bounded by boxBenchRun
}

// newBoxBench starts a dev stack under a short data dir: runsc socket paths must fit 108 bytes,
// which b.TempDir's long names do not leave room for.
func newBoxBench(b *testing.B) *boxBench {
	b.Helper()
	return newBoxBenchWith(b, func(*config.Dev) {})
}

// newBoxBenchWith is newBoxBench with the stack's configuration changed by set.
func newBoxBenchWith(b *testing.B, set func(*config.Dev)) *boxBench {
	b.Helper()
	dir := shortTemp(b)
	ctx, cancel := context.WithTimeout(context.Background(), boxBenchWait)
	defer cancel()
	cfg := benchConfig(b, filepath.Join(dir, "h"))
	set(&cfg)
	d, err := devstack.Start(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		b.Fatal(err)
	}
	url, token := d.Sandbox()
	run, stop := context.WithTimeout(context.Background(), boxBenchRun)
	b.Cleanup(stop)
	// The owner's name, as the API's front door passes it on from the token's lookup.
	run = boxsvc.WithCallerName(run, owner.ID, owner.Name)
	return &boxBench{d: d, owner: owner.ID, eng: sandbox.NewHTTP(url, token, &http.Client{Timeout: boxBenchWait}), ctx: run}
}

// warmPool sets a warm pool of one for the boxes the worker claims (template base, small, no
// network) and returns a wait for it to be full. The pool is drained at cleanup, so the stack's
// shutdown races no refill.
func (e *boxBench) warmPool(b *testing.B) (waitFull func()) {
	b.Helper()
	return e.warmPoolOf(b, 1)
}

// warmPoolOf is warmPool with n boxes.
func (e *boxBench) warmPoolOf(b *testing.B, n int) (waitFull func()) {
	b.Helper()
	spec := sandbox.PoolSpec{Template: "base", Size: sandbox.SizeSmall, Warm: n}
	if _, err := e.eng.SetPools(e.ctx, []sandbox.PoolSpec{spec}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = e.eng.SetPools(context.Background(), nil) })
	return func() {
		b.Helper()
		boxWaitFor(b, "the warm pool to fill", func() bool {
			info, err := e.eng.Info(e.ctx)
			if err != nil {
				b.Fatal(err)
			}
			return len(info.Pools) == 1 && info.Pools[0].Warm == n
		})
	}
}

// create makes a small box through the workflow.
func (e *boxBench) create(b *testing.B) cocoonbox.BoxID {
	b.Helper()
	id := cocoonbox.NewBoxID()
	st, err := e.d.Boxes.Create(e.ctx, e.owner, boxsvc.CreateRequest{ID: id, Name: "bench", Size: cocoonbox.SizeSmall})
	if err != nil || st.State != cocoonbox.BoxStateRunning {
		b.Fatalf("create: %+v, %v", st, err)
	}
	return id
}

func (e *boxBench) boxOp(b *testing.B, what string, op boxOpFunc, id cocoonbox.BoxID, want cocoonbox.BoxState) {
	b.Helper()
	if err := e.boxErr(what, op, id, want); err != nil {
		b.Fatal(err)
	}
}

// boxOpFunc is a boxsvc operation on one box, such as Hibernate.
type boxOpFunc func(context.Context, string, cocoonbox.BoxID) (boxsvc.View, error)

// boxErr runs op on box id as its owner and says why when it fails or leaves the box not in want.
func (e *boxBench) boxErr(what string, op boxOpFunc, id cocoonbox.BoxID, want cocoonbox.BoxState) error {
	st, err := op(e.ctx, e.owner, id)
	if err != nil || st.State != want {
		return fmt.Errorf("%s: %+v, %v; want %s", what, st, err, want)
	}
	return nil
}

// sandboxOf is box id's current sandbox, its token read with the engine's root token.
func (e *boxBench) sandboxOf(b *testing.B, id cocoonbox.BoxID) sandbox.SandboxRef {
	b.Helper()
	v, err := e.d.Boxes.Get(e.ctx, e.owner, id)
	if err != nil {
		b.Fatal(err)
	}
	row, err := e.eng.Get(e.ctx, v.SandboxID)
	if err != nil {
		b.Fatal(err)
	}
	return sandbox.SandboxRef{ID: v.SandboxID, Token: row.Token}
}

// claim claims a small base box with the sandbox client, as the Claim activity does.
func (e *boxBench) claim(b *testing.B) sandbox.SandboxRef {
	b.Helper()
	c, err := e.eng.Claim(e.ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: string(cocoonbox.NewBoxID()) + "/1"})
	if err != nil {
		b.Fatal(err)
	}
	return c.SandboxRef
}

// claimLikeBox claims a raw sandbox and puts it in the state of a box's: ready, with the agent
// credential written as the worker's ready probe writes it (the agent then listens, which makes
// a checkpoint of its memory about 5 ms longer than one of an agent still waiting).
func (e *boxBench) claimLikeBox(b *testing.B) sandbox.SandboxRef {
	b.Helper()
	sb := e.claim(b)
	e.ready(b, sb)
	res, err := e.eng.Exec(e.ctx, sb, boxlink.CredentialExec(strings.Repeat("0", 64)))
	if err == nil {
		err = boxlink.CredentialResult(res)
	}
	if err != nil {
		b.Fatal(err)
	}
	return sb
}

// ready is the WaitReady activity's probe without a credential: exec `true`.
func (e *boxBench) ready(b *testing.B, sb sandbox.SandboxRef) {
	b.Helper()
	res, err := e.eng.Exec(e.ctx, sb, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 10})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("exec true: %+v, %v", res, err)
	}
}

func (e *boxBench) do(b *testing.B, what string, f func(context.Context, sandbox.SandboxRef) error, sb sandbox.SandboxRef) {
	b.Helper()
	if err := f(e.ctx, sb); err != nil {
		b.Fatalf("%s: %v", what, err)
	}
}

// boxWaitFor polls cond every 20 ms until it holds or boxBenchWait passes.
func boxWaitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(boxBenchWait)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %v waiting for %s", boxBenchWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkBoxCreateWarm: boxsvc Create (Update-with-Start, record the row, claim from a full
// warm pool, wait until the box answers) until it answers running; the delete and the pool refill
// between samples are untimed.
func BenchmarkBoxCreateWarm(b *testing.B) {
	e := newBoxBench(b)
	waitFull := e.warmPool(b)
	var samples []time.Duration
	for b.Loop() {
		waitFull()
		start := time.Now()
		id := e.create(b)
		samples = append(samples, time.Since(start))
		e.boxOp(b, "delete", e.d.Boxes.Delete, id, cocoonbox.BoxStateDeleted)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkBoxCycleHistory: the events a hibernate and a wake add to the box workflow's history,
// which bounds how many cycles a box lives before continue-as-new and what each costs Temporal's
// store.
func BenchmarkBoxCycleHistory(b *testing.B) {
	e := newBoxBench(b)
	id := e.create(b)
	length := func() int64 {
		desc, err := e.d.Temporal.DescribeWorkflowExecution(e.ctx, workflows.BoxWorkflowID(id), "")
		if err != nil {
			b.Fatal(err)
		}
		return desc.GetWorkflowExecutionInfo().GetHistoryLength()
	}
	var events []float64
	for b.Loop() {
		before := length()
		e.boxOp(b, "hibernate", e.d.Boxes.Hibernate, id, cocoonbox.BoxStateHibernated)
		e.boxOp(b, "wake", e.d.Boxes.Wake, id, cocoonbox.BoxStateRunning)
		events = append(events, float64(length()-before))
	}
	benchreport.Count(b, events, "events")
}

// burstSize is how many creates a burst starts at once, from a warm pool as large.
const burstSize = 20

// BenchmarkBoxCreateBurst: burstSize creates through the workflow started at once from a full
// warm pool of burstSize, each timed until its box answers (Update-with-Start, row, claim, ready
// probe), as a class of students opening their desktops together would; the deletes and the
// refill between bursts are untimed.
func BenchmarkBoxCreateBurst(b *testing.B) {
	e := newBoxBenchWith(b, func(c *config.Dev) { c.Quota.Boxes = burstSize })
	waitFull := e.warmPoolOf(b, burstSize)
	var samples []time.Duration
	for b.Loop() {
		waitFull()
		ids, took := e.burst(b, func(i int) (cocoonbox.BoxID, error) {
			id := cocoonbox.NewBoxID()
			st, err := e.d.Boxes.Create(e.ctx, e.owner, boxsvc.CreateRequest{ID: id, Name: fmt.Sprintf("burst-%d", i), Size: cocoonbox.SizeSmall})
			if err == nil && st.State != cocoonbox.BoxStateRunning {
				err = fmt.Errorf("box %s is %s", id, st.State)
			}
			return id, err
		})
		samples = append(samples, took...)
		e.burst(b, func(i int) (cocoonbox.BoxID, error) {
			_, err := e.d.Boxes.Delete(e.ctx, e.owner, ids[i])
			return ids[i], err
		})
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawEngineClaimBurst: what a burst asks of the engine, with the sandbox client directly:
// burstSize warm claims started at once from a full pool of burstSize, each then probed with exec
// of true.
func BenchmarkRawEngineClaimBurst(b *testing.B) {
	e := newBoxBench(b)
	waitFull := e.warmPoolOf(b, burstSize)
	var samples []time.Duration
	for b.Loop() {
		waitFull()
		refs := make([]sandbox.SandboxRef, burstSize)
		_, took := e.burst(b, func(i int) (cocoonbox.BoxID, error) {
			c, err := e.eng.Claim(e.ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: string(cocoonbox.NewBoxID()) + "/1"})
			if err != nil {
				return "", err
			}
			refs[i] = c.SandboxRef
			res, err := e.eng.Exec(e.ctx, c.SandboxRef, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 10})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exec true: exit %d", res.ExitCode)
			}
			return "", err
		})
		samples = append(samples, took...)
		e.burst(b, func(i int) (cocoonbox.BoxID, error) { return "", e.eng.Release(e.ctx, refs[i]) })
	}
	benchreport.Latency(b, samples)
}

// burst runs op for 0..burstSize-1 at once and returns what each returned and how long each took
// from the common start; any error fails b once all have ended.
func (e *boxBench) burst(b *testing.B, op func(i int) (cocoonbox.BoxID, error)) ([]cocoonbox.BoxID, []time.Duration) {
	b.Helper()
	ids := make([]cocoonbox.BoxID, burstSize)
	took := atOnce(b, burstSize, func(i int) (err error) {
		ids[i], err = op(i)
		return err
	})
	return ids, took
}

// atOnce runs op for 0..n-1 at once and returns how long each took from the common start; any
// error fails b once all have ended.
func atOnce(b *testing.B, n int, op func(i int) error) []time.Duration {
	b.Helper()
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			errs[i] = op(i)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkBoxCreateCold: the same create with no warm pool, so the engine boots the box for it:
// the figure a create without a ready box costs, beside the warm one.
func BenchmarkBoxCreateCold(b *testing.B) {
	e := newBoxBench(b)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		id := e.create(b)
		samples = append(samples, time.Since(start))
		e.boxOp(b, "delete", e.d.Boxes.Delete, id, cocoonbox.BoxStateDeleted)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawEngineClaimWarm: what the workflow's create asks of the engine, with the sandbox
// client directly: a claim served from a full warm pool, then the first exec of `true` (the
// WaitReady probe). The release and refill between samples are untimed.
func BenchmarkRawEngineClaimWarm(b *testing.B) {
	e := newBoxBench(b)
	waitFull := e.warmPool(b)
	var samples []time.Duration
	for b.Loop() {
		waitFull()
		start := time.Now()
		sb := e.claim(b)
		e.ready(b, sb)
		samples = append(samples, time.Since(start))
		e.do(b, "release", e.eng.Release, sb)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkHibernate: boxsvc Hibernate of a running box until it answers hibernated (Box),
// in turn with POST .../hibernate of a raw sandbox of the same kind with the sandbox client
// (RawEngine); the wake after each is untimed.
func BenchmarkHibernate(b *testing.B) {
	e := newBoxBench(b)
	id := e.create(b)
	sb := e.claimLikeBox(b)
	interleaved(b, 30,
		timed{"Box", func(b *testing.B) time.Duration {
			time.Sleep(boxBenchPause)
			took := since(b, func() error { return e.boxErr("hibernate", e.d.Boxes.Hibernate, id, cocoonbox.BoxStateHibernated) })
			time.Sleep(boxBenchPause)
			e.boxOp(b, "wake", e.d.Boxes.Wake, id, cocoonbox.BoxStateRunning)
			return took
		}},
		timed{"RawEngine", func(b *testing.B) time.Duration {
			time.Sleep(boxBenchPause)
			took := since(b, func() error { return e.eng.Hibernate(e.ctx, sb) })
			time.Sleep(boxBenchPause)
			e.do(b, "wake", e.eng.Wake, sb)
			e.ready(b, sb)
			return took
		}},
	)
	e.boxOp(b, "delete", e.d.Boxes.Delete, id, cocoonbox.BoxStateDeleted)
	e.do(b, "release", e.eng.Release, sb)
}

// BenchmarkWake: boxsvc Wake of a hibernated box (engine wake, then the ready probe) until it
// answers running (Box), in turn with what it asks of the engine, with the sandbox client: POST
// .../wake, then the first exec of true (RawEngine); the hibernate before each is untimed.
func BenchmarkWake(b *testing.B) {
	e := newBoxBench(b)
	id := e.create(b)
	sb := e.claimLikeBox(b)
	interleaved(b, 30,
		timed{"Box", func(b *testing.B) time.Duration {
			e.boxOp(b, "hibernate", e.d.Boxes.Hibernate, id, cocoonbox.BoxStateHibernated)
			time.Sleep(boxBenchPause)
			took := since(b, func() error { return e.boxErr("wake", e.d.Boxes.Wake, id, cocoonbox.BoxStateRunning) })
			time.Sleep(boxBenchPause)
			return took
		}},
		timed{"RawEngine", func(b *testing.B) time.Duration {
			e.do(b, "hibernate", e.eng.Hibernate, sb)
			time.Sleep(boxBenchPause)
			took := since(b, func() error {
				if err := e.eng.Wake(e.ctx, sb); err != nil {
					return err
				}
				res, err := e.eng.Exec(e.ctx, sb, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 10})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exec true: exit %d", res.ExitCode)
				}
				return err
			})
			time.Sleep(boxBenchPause)
			return took
		}},
	)
	e.boxOp(b, "delete", e.d.Boxes.Delete, id, cocoonbox.BoxStateDeleted)
	e.do(b, "release", e.eng.Release, sb)
}
