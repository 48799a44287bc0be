package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func TestAgentWatchText(t *testing.T) {
	withFake(t)
	golden(t, "agent_watch", []byte(runOK(t, "", "agent", "watch", "run_ok")))
	golden(t, "agent_watch_failed", []byte(runOK(t, "", "agent", "watch", "run_bad")))
	golden(t, "agent_show", []byte(runOK(t, "", "agent", "show", "run_ok")))
	golden(t, "agent_ls", []byte(runOK(t, "", "agent", "ls", "web")))
	golden(t, "agent_ls_empty", []byte(runOK(t, "", "agent", "ls", "build-farm")))
	golden(t, "usage_by_run", []byte(runOK(t, "", "usage", "--since", "2026-11-01")))
	golden(t, "usage_by_user", []byte(runOK(t, "", "usage", "--by", "user", "--since", "2026-11-01")))
	golden(t, "usage_by_box", []byte(runOK(t, "", "usage", "--by", "box", "--since", "2026-11-01")))
	if got := runOK(t, "", "admin", "budget", "ann", "--tokens-per-month", "100000", "--box-hours-per-month", "40.5"); got != "ann\ntokens:     100000 a month; 12400 used this month\nbox-hours:  40.5 a month; 3.25 used this month\n" {
		t.Errorf("admin budget: %q", got)
	}
	if got := runOK(t, "", "admin", "budget", "ann"); got != "ann\ntokens:     no budget; 12400 used this month\nbox-hours:  no budget; 3.25 used this month\n" {
		t.Errorf("admin budget without a flag: %q", got)
	}
}

// TestUsageFlags: a bad --since is refused before the call, naming the flag; a bad --by is the
// server's word, naming the field.
func TestUsageFlags(t *testing.T) {
	withFake(t)
	if _, stderr, code := runCLI(t, "", "usage", "--since", "last week"); code != exitUsage || !strings.Contains(stderr, "--since: want an age such as 7d") {
		t.Errorf("bad --since: %d %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, "", "usage", "--by", "day"); code != exitUsage || !strings.Contains(stderr, "by: must be user, box, run or model") {
		t.Errorf("bad --by: %d %q", code, stderr)
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"7d": now.Add(-7 * 24 * time.Hour), "90m": now.Add(-90 * time.Minute), "2026-12-01": time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestAgentWatchJSON: one JSON event a line, steps and run states, the last the ended run.
func TestAgentWatchJSON(t *testing.T) {
	withFake(t)
	out := runOK(t, "", "agent", "watch", "run_ok", "-o", "json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var kinds []string
	var last cbv1.WatchRunEvent
	for _, l := range lines {
		if err := protojson.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch {
		case last.GetStep() != nil:
			kinds = append(kinds, "step")
		case last.GetText() != nil:
			kinds = append(kinds, "text")
		default:
			kinds = append(kinds, last.GetRun().GetState())
		}
	}
	if got := strings.Join(kinds, " "); got != "step running waiting running waiting_for_user running step text text step succeeded" {
		t.Fatalf("events %s\n%s", got, out)
	}
	if last.GetRun().GetResult() != sampleSteps()[2].GetText() || last.GetRun().GetStepsDone() != 3 {
		t.Fatalf("final %v", &last)
	}
}

func TestAgentRunFollowsAndDetaches(t *testing.T) {
	f := withFake(t)
	out := runOK(t, "", "agent", "run", "web", "fix", "the", "site", "--model", "gpt-x", "--max-steps", "20")
	want := &cbv1.StartRunRequest{Box: "web", Task: "fix the site", Model: "gpt-x", MaxSteps: 20}
	if got := f.last("StartRun"); !proto.Equal(got, want) {
		t.Fatalf("request %v, want %v", got, want)
	}
	golden(t, "agent_run", []byte(out))

	stdout, stderr, code := runCLI(t, "", "agent", "run", "-d", "web", "fix the site")
	if code != 0 || stdout != "run_ok\n" || !strings.Contains(stderr, "cocoonbox agent watch run_ok") {
		t.Fatalf("detach: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, ok := f.last("WatchRun").(*cbv1.WatchRunRequest); !ok {
		t.Fatal("the attached run was not followed")
	}
	var run cbv1.AgentRun
	if err := protojson.Unmarshal([]byte(runOK(t, "", "agent", "run", "web", "x", "--detach", "-o", "json")), &run); err != nil || run.GetId() != "run_ok" {
		t.Fatalf("detach json %v %v", &run, err)
	}
	// Attached JSON: the started run, then the watch's events, each on a line.
	out = runOK(t, "", "agent", "run", "web", "break it", "-o", "json")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], `{"run":{"id":"run_bad"`) {
		t.Fatalf("json lines %q", out)
	}
}

func TestAgentAsk(t *testing.T) {
	withFake(t)
	if out := runOK(t, "", "agent", "ask", "web", "is", "the", "site", "up?"); out != sampleSteps()[2].GetText()+"\n" {
		t.Fatalf("answer %q", out)
	}
	var run cbv1.AgentRun
	if err := protojson.Unmarshal([]byte(runOK(t, "", "agent", "ask", "-o", "json", "web", "up?")), &run); err != nil || run.GetState() != "succeeded" {
		t.Fatalf("json %v %v", &run, err)
	}
}

func TestAgentCommandsSendTheirArguments(t *testing.T) {
	f := withFake(t)
	for _, tc := range []struct {
		args []string
		want proto.Message
		out  string
	}{
		{[]string{"agent", "say", "run_live", "try", "port", "8080"}, &cbv1.SendMessageRequest{RunId: "run_live", Text: "try port 8080"}, "sent to run_live\n"},
		{[]string{"agent", "cancel", "run_live"}, &cbv1.CancelRunRequest{RunId: "run_live"}, "cancelling run_live\n"},
		{[]string{"agent", "cancel", "run_ok"}, &cbv1.CancelRunRequest{RunId: "run_ok"}, "run_ok already succeeded\n"},
		{[]string{"agent", "ls", "web", "-o", "json"}, &cbv1.ListRunsRequest{Box: "web"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := runOK(t, "", tc.args...)
			if got := f.lastOf(tc.want); !proto.Equal(got, tc.want) {
				t.Errorf("request %v, want %v", got, tc.want)
			}
			if tc.out != "" && out != tc.out {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
		})
	}
	var runs []json.RawMessage
	if err := json.Unmarshal([]byte(runOK(t, "", "agent", "ls", "web", "-o", "json")), &runs); err != nil || len(runs) != 3 {
		t.Fatalf("ls json %v", err)
	}
}

func TestAgentErrors(t *testing.T) {
	withFake(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"agent", "ask", "web", "break", "it"}, 1, "run run_bad failed: model: 400 the context is too long"},
		{[]string{"agent", "ask", "web", "x", "--model", "nope"}, 2, `model: "nope" is not offered here`},
		{[]string{"agent", "run", "nope", "x"}, 3, `box "nope" not found`},
		{[]string{"agent", "watch", "run_x"}, 3, "run run_x not found"},
		{[]string{"agent", "show", "run_x"}, 3, "run run_x not found"},
		{[]string{"agent", "say", "run_ok", "hello"}, 5, "run run_ok is succeeded"},
		{[]string{"agent", "run", "web"}, 2, "usage: cocoonbox agent run BOX TASK..."},
		{[]string{"agent", "say", "run_ok"}, 2, "usage: cocoonbox agent say RUN TEXT..."},
		{[]string{"agent", "run", "web", "x", "--max-steps", "-1"}, 2, "--max-steps must be positive"},
		{[]string{"agent", "frob"}, 2, `agent: unknown command "frob"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.HasPrefix(stderr, "cocoonbox: ") || !strings.Contains(stderr, tc.stderr) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d (want %d), stderr %q (want one line containing %q)", code, tc.code, stderr, tc.stderr)
			}
			if stdout != "" {
				t.Fatalf("stdout %q on failure", stdout)
			}
		})
	}
}

// TestAgentWatchInterrupted: Ctrl-C stops following, says the run goes on and how to stop it,
// and is no failure.
func TestAgentWatchInterrupted(t *testing.T) {
	f := withFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := newApp()
	out, errb := &syncBuffer{printed: make(chan struct{})}, &syncBuffer{}
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(""), out, errb
	done := make(chan int, 1)
	go func() { done <- report(app.RunContext(ctx, []string{"cocoonbox", "agent", "watch", "run_live"}), errb) }()
	for _, c := range []chan struct{}{f.agent.watching, out.printed} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("the watch never printed its first step: %q", out.String())
		}
	}
	cancel() // as main's signal.NotifyContext does on Ctrl-C
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "step 1  called shell, screenshot\n") {
		t.Fatalf("stdout %q", out.String())
	}
	if !strings.Contains(errb.String(), "the run continues; cocoonbox agent cancel run_live stops it") {
		t.Fatalf("stderr %q", errb.String())
	}
}

// syncBuffer is a bytes.Buffer a test may read while a command writes to it; printed, if set,
// is closed after the first write.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	printed chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.printed != nil && s.b.Len() == 0 {
		defer close(s.printed)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
