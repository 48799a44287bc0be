package devstack_test

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestAgentAttempts runs a task best-of-3 with the scripted model, each attempt writing its own
// file on its own fork: the judge, shown each attempt's steps and final screen, picks the
// scripted winner; the worker is SIGKILLed while the judge's model call is under way, and the
// run still judges once; accepting gives the box the winner's state (its file, not the others')
// and the forks are gone.
func TestAgentAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	a, models, w, wcfg := newAgentEnvWithChildWorker(t, 10*time.Minute)
	attemptRe := regexp.MustCompile(`This is attempt (\d) of 3`)
	judged := make(chan struct{}, 4)
	var judges atomic.Int32
	turn := modeltest.Turn{Answer: func(body []byte) modeltest.Turn {
		if bytes.Contains(body, []byte("You judge attempts")) {
			judged <- struct{}{}
			if judges.Add(1) == 1 {
				time.Sleep(5 * time.Second) // the worker is killed meanwhile
			}
			return modeltest.Reply(`{"winner": 2, "reason": "attempt 2 wrote the file with the right number"}`)
		}
		m := attemptRe.FindSubmatch(body)
		if m == nil {
			return modeltest.Fault(400, "no attempt number in the request")
		}
		if bytes.Contains(body, []byte(`"role":"tool"`)) {
			return modeltest.Reply("attempt " + string(m[1]) + " done")
		}
		return modeltest.Calls(modeltest.Call("shell", `{"command":"echo `+string(m[1])+` > /home/user/attempt-`+string(m[1])+`.txt"}`))
	}}
	for range 10 {
		models.Script(turn)
	}

	att, err := a.agents.StartAttempts(a.auth, &cbv1.StartAttemptsRequest{Box: string(a.id), Task: "Write your attempt's number into a file.", Attempts: 3})
	if err != nil {
		t.Fatalf("start attempts: %v", err)
	}
	if len(att.GetAttempts()) != 3 {
		t.Fatalf("attempts %v", att.GetAttempts())
	}
	select {
	case <-judged:
	case <-time.After(3 * time.Minute):
		t.Fatal("the judge was never asked")
	}
	w.kill()
	startChildWorker(t, wcfg)

	if err := testutil.Poll(a.ctx, 3*time.Minute, func() error {
		if att, err = a.agents.GetAttempts(a.auth, &cbv1.GetAttemptsRequest{Id: att.GetId()}); err != nil {
			return err
		}
		if att.GetState() != string(cocoonbox.AttemptsJudged) {
			return fmt.Errorf("attempts %s", att.GetState())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if att.GetWinner() != 2 || !strings.Contains(att.GetReason(), "right number") {
		t.Fatalf("the judge picked %d (%q), want the scripted 2", att.GetWinner(), att.GetReason())
	}
	for _, at := range att.GetAttempts() {
		if at.GetState() != string(cocoonbox.AgentRunSucceeded) || at.GetResult() != fmt.Sprintf("attempt %d done", at.GetNumber()) {
			t.Fatalf("attempt %d: %s %q", at.GetNumber(), at.GetState(), at.GetResult())
		}
	}
	var judgeImages int
	for _, r := range models.Requests() {
		if bytes.Contains(r.Body, []byte("You judge attempts")) {
			judgeImages = len(modeltest.Images(r.Body))
		}
	}
	if judgeImages != 3 {
		t.Fatalf("the judge was shown %d screens, want the 3 attempts'", judgeImages)
	}
	if got := a.mustRun(t, "ls /home/user | grep attempt- || true"); got != "" {
		t.Fatalf("the box changed before the pick was accepted: %q", got)
	}

	att, err = a.agents.AcceptAttempts(a.auth, &cbv1.AcceptAttemptsRequest{Id: att.GetId()})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if att.GetState() != string(cocoonbox.AttemptsAccepted) || att.GetChosen() != 2 {
		t.Fatalf("accepted attempts: %s, chose %d", att.GetState(), att.GetChosen())
	}
	if got := a.mustRun(t, "ls /home/user | grep attempt-; cat /home/user/attempt-2.txt"); got != "attempt-2.txt\n2\n" {
		t.Fatalf("after accepting attempt 2 the box holds %q", got)
	}
	boxes, err := a.d.Boxes.List(a.ctx, a.owner.ID)
	if err != nil || len(boxes) != 1 || boxes[0].BoxID != a.id {
		t.Fatalf("after accepting, the owner's boxes are %+v (%v); want the box alone", boxes, err)
	}
	t.Logf("judged %d time(s) across a killed worker; the box has the winner's state", judges.Load())
}
