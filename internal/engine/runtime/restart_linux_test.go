package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// helperEnv makes the test binary act as a short-lived engine (see TestMain): it starts one
// box with the runtime and spec given in the environment, says so, and waits to be killed.
const helperEnv = "COCOONBOX_RUNTIME_TEST_ENGINE"

type helperConfig struct {
	Runtime string
	DataDir string
	Spec    Spec
}

func TestMain(m *testing.M) {
	if v, ok := config.Env()(helperEnv); ok {
		if err := helperEngine(v); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		select {} // until SIGKILL
	}
	os.Exit(m.Run())
}

func helperEngine(v string) error {
	var hc helperConfig
	if err := json.Unmarshal([]byte(v), &hc); err != nil {
		return err
	}
	rt, err := New(hc.Runtime, Options{DataDir: hc.DataDir, InsecureNoIsolation: hc.Runtime == NameProcess})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := rt.Start(ctx, hc.Spec); err != nil {
		return err
	}
	code, err := rt.Exec(ctx, hc.Spec.ID, ExecRequest{Argv: []string{"sh", "-c",
		"echo before > /root/mark; setsid sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & echo $! > /root/loop.pid"}})
	if err != nil || code != 0 {
		return fmt.Errorf("exec: %d, %v", code, err)
	}
	fmt.Println("started")
	return nil
}

// An engine killed with SIGKILL leaves its boxes running, and the next engine takes them over.
func TestBoxesSurviveEngineSIGKILL(t *testing.T) {
	for _, name := range []string{NameGVisor, NameProcess} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, name)
			spec := e.spec()
			t.Cleanup(func() {
				if err := e.rt.Destroy(context.Background(), spec.ID); err != nil {
					t.Error(err)
				}
			})
			v, _ := json.Marshal(helperConfig{Runtime: name, DataDir: e.data, Spec: spec})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+string(v))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if line != "started\n" {
				t.Fatalf("helper engine: %q", line)
			}

			ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
			defer cancel()
			if st, err := e.rt.State(ctx, spec.ID, spec.Dir); err != nil || st != StateRunning {
				t.Fatalf("after the engine's SIGKILL: %s, %v", st, err)
			}
			if got := e.sh(t, spec.ID, "cat /root/mark; kill -0 $(cat /root/loop.pid) && echo alive"); got != "before\nalive\n" {
				t.Fatalf("after the engine's SIGKILL the box holds %q", strings.TrimSpace(got))
			}
			if err := e.rt.Hibernate(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
			if err := e.rt.Wake(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
