package devstack_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// The preview benchmarks GET a page from a web server in a box (portServer, on 8000): through the
// API's preview (bearer auth, the box service's role check and ports relay dial, the reverse
// proxy) and, raw, through the engine's ports relay with the sandbox client, the same request
// written on the relay's connection.

// startPortServer starts portServer in the box through exec and waits until it answers.
func startPortServer(b *testing.B, run func(argv []string, env map[string]string) error, get func() error) {
	b.Helper()
	if err := run([]string{"sh", "-c", `python3 -c "$SRV" >/dev/null 2>&1 &`}, map[string]string{"SRV": portServer}); err != nil {
		b.Fatal(err)
	}
	boxWaitFor(b, "the box's web server", func() bool { return get() == nil })
}

// BenchmarkPreviewGet: GET through the API's preview of port 8000 of a running box.
func BenchmarkPreviewGet(b *testing.B) {
	e := newAPIBench(b)
	url := e.d.URLs().API + "/v1/boxes/" + e.box + "/ports/8000/bench"
	client := &http.Client{Timeout: boxBenchWait}
	get := func() error {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "GET /bench") {
			return fmt.Errorf("preview: %s %q", resp.Status, body)
		}
		return nil
	}
	startPortServer(b, func(argv []string, env map[string]string) error {
		_, err := e.d.Boxes.Exec(e.ctx, e.owner, cocoonbox.BoxID(e.box), boxsvc.ExecRequest{Argv: argv, Env: env})
		return err
	}, get)
	timeCalls(b, get)
}

// BenchmarkRawRelayGet: the same GET written on a ports-relay connection to the box's 8000, with
// the sandbox client directly.
func BenchmarkRawRelayGet(b *testing.B) {
	e := newBoxBench(b)
	sb := e.claim(b)
	e.ready(b, sb)
	get := func() error {
		c, err := e.eng.DialPort(e.ctx, sb, 8000)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(boxBenchWait))
		if _, err := io.WriteString(c, "GET /bench HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			return fmt.Errorf("relay: %q %v", line, err)
		}
		_, _ = io.Copy(io.Discard, c)
		return nil
	}
	startPortServer(b, func(argv []string, env map[string]string) error {
		_, err := e.eng.Exec(e.ctx, sb, sandbox.ExecRequest{Argv: argv, Env: env, TimeoutSeconds: 10})
		return err
	}, get)
	timeCalls(b, get)
	e.do(b, "release", e.eng.Release, sb)
}
