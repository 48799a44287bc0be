package conformance

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// execChecks covers exec's semantics: exit codes and stderr are results, env and cwd apply, a
// timeout is 504 with the child killed, output over 8 MiB is 413, and output below it arrives
// whole.
func (s *suite) execChecks(t *testing.T) {
	t.Parallel()
	c := s.h.Root
	sb := s.claim(t, "exec")

	res, err := c.Exec(s.ctx(t), sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Errorf("exit 3: got %+v, %v", res, err)
	}
	res, err = c.Exec(s.ctx(t), sb.SandboxRef, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", `echo "$CONFORMANCE_VAR"; pwd`}, Env: map[string]string{"CONFORMANCE_VAR": "v-" + s.run}, Cwd: "/tmp"})
	if err != nil || res.Stdout != "v-"+s.run+"\n/tmp\n" {
		t.Errorf("env and cwd: got %+v, %v", res, err)
	}

	start := time.Now()
	_, err = c.Exec(s.ctx(t), sb.SandboxRef, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", "sleep 3; echo late > /tmp/late"}, TimeoutSeconds: 1})
	wantErr(t, "exec past its timeout", err, sandbox.ErrTimeout, http.StatusGatewayTimeout)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("exec with a 1 s timeout answered after %s", took)
	}
	// Had the child survived its timeout it would write the file three seconds after it started.
	if out := s.sh(t, sb.SandboxRef, "sleep 3; cat /tmp/late 2>/dev/null || echo killed"); out != "killed\n" {
		t.Errorf("the timed-out command was not killed: /tmp/late holds %q", out)
	}

	_, err = c.Exec(s.ctx(t), sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 9000000 /dev/zero | tr '\\0' a"}})
	wantErr(t, "exec with 9 MB of output", err, sandbox.ErrTooLarge, http.StatusRequestEntityTooLarge)

	res, err = c.Exec(s.ctx(t), sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a"}})
	if err != nil || res.Stdout != strings.Repeat("a", 1000000) {
		t.Errorf("exec with 1 MB of output: %d bytes, %v", len(res.Stdout), err)
	}
	if out := s.sh(t, sb.SandboxRef, "echo still here"); out != "still here\n" {
		t.Errorf("sandbox after the refused execs: %q", out)
	}
}
