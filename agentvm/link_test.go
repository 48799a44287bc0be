package agentvm_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/wire"
)

// noNetwork is the model client of a loop in a box: using it fails the test.
type noNetwork struct{ t *testing.T }

func (n noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("model call to %s went around the links", r.URL)
	return nil, errors.New("the box has no network")
}

// startLinkAgent serves an agent whose loop calls the model only over links, and returns the
// address of its link listener.
func startLinkAgent(t *testing.T, links *agentvm.Links) (*agentvm.Loop, string) {
	t.Helper()
	dir := t.TempDir()
	loop := newLoop(dir, new(atomic.Int32))
	loop.HTTPClient = &http.Client{Transport: noNetwork{t}}
	loop.Links = links
	j, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
	require.NoError(t, err)
	srv, err := agentvm.NewServer(agentvm.Config{Credential: testCredential, Loop: loop, Journal: j})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.ServeLinks(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
	return loop, lis.Addr().String()
}

// openLink opens a link with the given first line and returns it with the agent's answer.
func openLink(t *testing.T, addr, line string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, line)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	answer, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	return c, answer
}

// pipeTo joins a link to the model server when the agent starts using it, as the control plane
// does, and reports whether it was used (false: the agent closed it unused).
func pipeTo(link net.Conn, srv *modeltest.Server) <-chan bool {
	used := make(chan bool, 1)
	u, _ := url.Parse(srv.URL)
	go func() {
		defer link.Close()
		first := make([]byte, 1)
		if _, err := io.ReadFull(link, first); err != nil {
			used <- false
			return
		}
		used <- true
		up, err := net.Dial("tcp", u.Host)
		if err != nil {
			return
		}
		go func() { _, _ = up.Write(first); _, _ = io.Copy(up, link); up.Close() }()
		_, _ = io.Copy(link, up)
	}()
	return used
}

func TestLinkCarriesTheStepsModelCalls(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			loop, addr := startLinkAgent(t, agentvm.NewLinks())
			srv := modeltest.NewServer(t, testKey, modeltest.Reply("Hello ", "there."))
			link, answer := openLink(t, addr, fmt.Sprintf("%s %s run-1 1\n", wire.LinkProtocol, testCredential))
			require.Equal(t, "OK\n", answer)
			pipeTo(link, srv)

			resp, err := loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.NoError(t, err)
			require.Equal(t, "Hello there.", resp.Text)
			require.Len(t, srv.Requests(), 1)
		})
	}
}

func TestLinkRefusesABadPreamble(t *testing.T) {
	_, addr := startLinkAgent(t, agentvm.NewLinks())
	for name, tc := range map[string]struct{ line, answer string }{
		"credential": {wire.LinkProtocol + " box-credential-124 run-1 1\n", "ERR invalid credential\n"},
		"empty":      {wire.LinkProtocol + "  run-1 1\n", "ERR bad preamble\n"},
		"protocol":   {"COCOONBOX-LINK/2 " + testCredential + " run-1 1\n", "ERR bad preamble\n"},
		"step":       {wire.LinkProtocol + " " + testCredential + " run-1 0\n", "ERR step must be 1 or more, not 0\n"},
		"fields":     {wire.LinkProtocol + " " + testCredential + " run-1\n", "ERR bad preamble\n"},
	} {
		c, answer := openLink(t, addr, tc.line)
		require.Equal(t, tc.answer, answer, name)
		require.NotContains(t, answer, testCredential, name)
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, name)
	}
	c, answer := openLink(t, addr, string(make([]byte, 600)))
	require.Equal(t, "ERR read preamble: line too long\n", answer)
	c.Close()
}

func TestLinkWaitFailsAStepWithoutLinks(t *testing.T) {
	links := agentvm.NewLinks()
	links.Wait = 100 * time.Millisecond
	loop, addr := startLinkAgent(t, links)
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("never"))
	// A link for another step is not this step's.
	_, answer := openLink(t, addr, fmt.Sprintf("%s %s run-1 2\n", wire.LinkProtocol, testCredential))
	require.Equal(t, "OK\n", answer)

	_, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 1, nil))
	require.Equal(t, codes.Unavailable, status.Code(err), err)
	require.Contains(t, err.Error(), "no model link from the control plane for run run-1 step 1")
	require.Empty(t, srv.Requests())
	require.Equal(t, 1, srv.Remaining())
}

func TestLinkOrphanIsClosed(t *testing.T) {
	links := agentvm.NewLinks()
	links.Orphan = 100 * time.Millisecond
	_, addr := startLinkAgent(t, links)
	// A link for a step that never runs is closed after Orphan.
	orphan, answer := openLink(t, addr, fmt.Sprintf("%s %s run-9 1\n", wire.LinkProtocol, testCredential))
	require.Equal(t, "OK\n", answer)
	require.NoError(t, orphan.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := orphan.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)

}

func TestLinkStepEndClosesItsUnusedLinks(t *testing.T) {
	links := agentvm.NewLinks()
	links.Orphan = time.Minute
	loop, addr := startLinkAgent(t, links)
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("done"))
	var used []<-chan bool
	for range 2 {
		link, answer := openLink(t, addr, fmt.Sprintf("%s %s run-1 1\n", wire.LinkProtocol, testCredential))
		require.Equal(t, "OK\n", answer)
		used = append(used, pipeTo(link, srv))
	}
	_, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderAnthropic, 1, nil))
	require.NoError(t, err)
	var n int
	for _, u := range used {
		select {
		case ok := <-u:
			if ok {
				n++
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a link stayed open after its step")
		}
	}
	require.Equal(t, 1, n, "links used")
}
