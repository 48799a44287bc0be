package activities

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	"github.com/loomhand/cocoonbox/internal/vault"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// countingVault is the real vault, counting the secrets opened through it.
type countingVault struct {
	*vault.Vault
	opened atomic.Int32
}

func (v *countingVault) Open(ctx context.Context, owner, name string) (string, error) {
	v.opened.Add(1)
	return v.Vault.Open(ctx, owner, name)
}

// untouchable is an engine any use of which fails the test: a refused step reaches no box.
type untouchable struct {
	sandbox.Client
	t *testing.T
}

func (u untouchable) DialPort(context.Context, sandbox.SandboxRef, int) (sandbox.Conn, error) {
	u.t.Error("a refused step dialed the box")
	return nil, sandbox.ErrUnavailable
}

func (u untouchable) Exec(context.Context, sandbox.SandboxRef, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	u.t.Error("a refused step ran a command in the box")
	return sandbox.ExecResult{}, sandbox.ErrUnavailable
}

// TestAgentStepRefusesARunTheDatabaseDoesNotConfirm: a step started by anyone who can reach
// Temporal, naming a run, box or owner the database does not back, is refused for good with the
// reason, before the box is woken or any secret opened.
func TestAgentStepRefusesARunTheDatabaseDoesNotConfirm(t *testing.T) {
	ctx := t.Context()
	st := storetest.New(t)
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	keys, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	user := func(name string) string {
		u, err := st.CreateUser(ctx, store.NewUser{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return u.ID
	}
	ann, bob, cat := user("ann"), user("bob"), user("cat")
	box := func(id cocoonbox.BoxID, owner string) cocoonbox.BoxID {
		if _, err := st.CreateBox(ctx, store.NewBox{ID: id, Owner: owner, Name: string(id), Size: cocoonbox.SizeSmall}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	annBox, bobBox, goneBox := box("bx_00000000000000a1", ann), box("bx_00000000000000b1", bob), box("bx_00000000000000c1", ann)
	run := func(id string, b cocoonbox.BoxID, owner string) {
		if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: id, BoxID: b, Owner: owner, Task: "t", Provider: "openai", Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	run("run_ann", annBox, ann)
	// bob could drive ann's box when he started his run; he is a viewer now.
	if _, err := st.PutShare(ctx, annBox, bob, cocoonbox.RoleDriver, nil); err != nil {
		t.Fatal(err)
	}
	run("run_bob_on_ann", annBox, bob)
	if _, err := st.PutShare(ctx, annBox, bob, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	// cat's share was taken away.
	if _, err := st.PutShare(ctx, annBox, cat, cocoonbox.RoleDriver, nil); err != nil {
		t.Fatal(err)
	}
	run("run_cat_on_ann", annBox, cat)
	if err := st.DeleteShare(ctx, annBox, cat); err != nil {
		t.Fatal(err)
	}
	run("run_gone", goneBox, ann)
	if err := st.MarkBoxDeleted(ctx, goneBox); err != nil {
		t.Fatal(err)
	}
	run("run_other_model", annBox, ann)

	v := &countingVault{Vault: &vault.Vault{Store: st, Keys: keys}}
	for _, owner := range []string{ann, bob, cat} {
		if _, err := v.Set(ctx, owner, "MODEL_KEY", "sk-canary-"+owner); err != nil {
			t.Fatal(err)
		}
	}
	var woken atomic.Int32
	a := &Agent{
		Link: &boxlink.Link{Sandbox: untouchable{t: t}, Tokens: fakeTokens{}, Credentials: testCreds}, Runs: st, Vault: v,
		Gateway: func() Gateway {
			return Gateway{Provider: ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1", KeySecret: "MODEL_KEY", Models: []string{"m"}}
		},
		Wake: func(context.Context, cocoonbox.BoxID) (BoxLease, error) {
			woken.Add(1)
			return BoxLease{}, nil
		},
	}
	for _, tc := range []struct {
		name string
		in   StepInput
		want string
	}{
		{"a run the API never started", StepInput{RunID: "run_forged", BoxID: annBox, Owner: ann}, "no such run"},
		{"another owner", StepInput{RunID: "run_ann", BoxID: annBox, Owner: bob}, "started by " + ann + ", not " + bob},
		{"another box", StepInput{RunID: "run_ann", BoxID: bobBox, Owner: ann}, "runs on box " + string(annBox)},
		{"a starter who is a viewer now", StepInput{RunID: "run_bob_on_ann", BoxID: annBox, Owner: bob}, "holds viewer"},
		{"a starter whose share was removed", StepInput{RunID: "run_cat_on_ann", BoxID: annBox, Owner: cat}, "no longer has a share"},
		{"a deleted box", StepInput{RunID: "run_gone", BoxID: goneBox, Owner: ann}, "is gone"},
		{"another model", StepInput{RunID: "run_other_model", BoxID: annBox, Owner: ann, Model: "gpt-expensive"}, `not "gpt-expensive"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Step, tc.in.Task = 1, "t"
			_, err := a.Step(ctx, tc.in)
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("step: %v; want a permanent refusal naming %q", err, tc.want)
			}
		})
	}
	if n := v.opened.Load(); n != 0 {
		t.Errorf("refused steps opened %d secrets", n)
	}
	if n := woken.Load(); n != 0 {
		t.Errorf("refused steps woke the box %d times", n)
	}
}
