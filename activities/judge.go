package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/internal/store"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// AttemptsStore is what the best-of-N activities read and write.
type AttemptsStore interface {
	AttemptsByID(ctx context.Context, id string) (store.Attempts, error)
	JudgeAttempts(ctx context.Context, id string, winner int, reason string) (store.Attempts, error)
	SetAttemptsState(ctx context.Context, id, state string, chosen int, reason string) error
	AgentSteps(ctx context.Context, run string) ([]store.AgentStep, error)
	AgentRunByID(ctx context.Context, id string) (store.AgentRun, error)
}

// JudgeInput names the best-of-N run to judge. Everything the judge acts on (the owner, the
// forks, the runs) is read from the run's row.
type JudgeInput struct {
	ID string
}

// JudgeResult is the judge's pick (1-based) and why.
type JudgeResult struct {
	Winner int
	Reason string
}

// judgeScreenWidth is the width of the screenshots the judge is shown.
const judgeScreenWidth = 1024

// judgeSystem is the judge's instruction; its answer is read as one JSON object.
const judgeSystem = "You judge attempts at one task, each made by an agent on its own copy of a computer. " +
	"Pick the attempt that did the task best, from what each agent said, the steps it took and its final screen. " +
	`Answer with one JSON object and nothing else: {"winner": <the attempt's number>, "reason": "<one sentence>"}.`

// Judge asks the run's model, through the operator's gateway with the owner's key, which
// attempt did the task best, and records the pick. A pick already recorded (a retried step) is
// returned as it is. An answer that names no attempt that succeeded is not taken: the first
// attempt that succeeded wins, and the reason says why.
func (a *Agent) Judge(ctx context.Context, in JudgeInput) (JudgeResult, error) {
	if a.Attempts == nil {
		return JudgeResult{}, classify(errors.New("judge: the worker has no attempts store"))
	}
	att, err := a.Attempts.AttemptsByID(ctx, in.ID)
	if err != nil {
		return JudgeResult{}, classify(fmt.Errorf("judge: %w", err))
	}
	if att.Winner > 0 {
		return JudgeResult{Winner: att.Winner, Reason: att.Reason}, nil
	}
	var msg model.Message
	msg.Role = model.RoleUser
	var text strings.Builder
	fmt.Fprintf(&text, "The task: %s\n\nThere are %d attempts.\n", att.Task, len(att.Runs))
	succeeded := []int{}
	for i, runID := range att.Runs {
		n := i + 1
		run, err := a.Attempts.AgentRunByID(ctx, runID)
		if err != nil {
			return JudgeResult{}, classify(fmt.Errorf("judge: %w", err))
		}
		steps, err := a.Attempts.AgentSteps(ctx, runID)
		if err != nil {
			return JudgeResult{}, classify(fmt.Errorf("judge: %w", err))
		}
		fmt.Fprintf(&text, "\nAttempt %d ended %s.\n", n, run.State)
		if run.State == cocoonbox.AgentRunSucceeded {
			succeeded = append(succeeded, n)
		}
		last := ""
		for _, s := range steps {
			fmt.Fprintf(&text, "  step %d: %s\n", s.Step, oneLine(s.Summary, 400))
			if t := s.Record().Text; t != "" {
				last = t
			}
		}
		if last != "" {
			fmt.Fprintf(&text, "  It said last: %s\n", oneLine(last, 1000))
		}
		if png := a.judgeScreen(ctx, att.Forks[i]); png != nil {
			fmt.Fprintf(&text, "  Its final screen is image %d.\n", len(msg.Images)+1)
			msg.Images = append(msg.Images, png)
		} else {
			text.WriteString("  Its final screen could not be taken.\n")
		}
	}
	if len(succeeded) == 0 {
		return JudgeResult{}, newError(ErrTypeInvalidArgument, errors.New("judge: no attempt succeeded"))
	}
	msg.Text = text.String()
	provider, err := a.judgeModel(ctx, att.Owner)
	if err != nil {
		return JudgeResult{}, err
	}
	start := time.Now()
	resp, err := whileHeartbeating(ctx, func(ctx context.Context) (model.Response, error) {
		return provider.Complete(ctx, model.Request{Model: att.Model, System: judgeSystem, Messages: []model.Message{msg}, MaxTokens: 512}, nil)
	})
	if a.Usage != nil {
		status := http.StatusOK
		var me *model.Error
		if errors.As(err, &me) {
			status = me.Status
		}
		rerr := a.Usage.RecordModelCall(ctx, store.ModelCall{RunID: att.ID, BoxID: att.BoxID, User: att.Owner, Model: att.Model,
			Status: status, InputTokens: int64(resp.InputTokens), OutputTokens: int64(resp.OutputTokens), Latency: time.Since(start)})
		if rerr != nil {
			return JudgeResult{}, classify(fmt.Errorf("judge: record the model call: %w", rerr))
		}
	}
	if err != nil {
		return JudgeResult{}, classify(fmt.Errorf("judge: the model: %w", err))
	}
	winner, reason := readVerdict(resp.Text, succeeded)
	att, err = a.Attempts.JudgeAttempts(ctx, att.ID, winner, reason)
	if err != nil {
		return JudgeResult{}, classify(fmt.Errorf("judge: %w", err))
	}
	return JudgeResult{Winner: att.Winner, Reason: att.Reason}, nil
}

// readVerdict reads the judge's answer: its JSON object's winner when that attempt succeeded,
// else the first that did, saying why.
func readVerdict(answer string, succeeded []int) (int, string) {
	var v struct {
		Winner int    `json:"winner"`
		Reason string `json:"reason"`
	}
	first, last := strings.Index(answer, "{"), strings.LastIndex(answer, "}")
	if first >= 0 && last > first && json.Unmarshal([]byte(answer[first:last+1]), &v) == nil {
		for _, n := range succeeded {
			if n == v.Winner {
				return n, oneLine(v.Reason, 500)
			}
		}
		return succeeded[0], fmt.Sprintf("the judge picked attempt %d, which did not succeed; the first that did is taken", v.Winner)
	}
	return succeeded[0], fmt.Sprintf("the judge's answer named no attempt (%q); the first that succeeded is taken", oneLine(answer, 200))
}

// judgeScreen is a screenshot of box id's desktop, woken through its workflow first; nil when
// there is none to take (no desktop, a box that is gone).
func (a *Agent) judgeScreen(ctx context.Context, id cocoonbox.BoxID) []byte {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if a.Wake != nil {
		if _, err := a.Wake(ctx, id); err != nil {
			return nil
		}
	}
	box, err := a.Link.Find(ctx, id)
	if err != nil {
		return nil
	}
	var png []byte
	err = a.Link.Desktop(ctx, box, func(ctx context.Context, c agentvmv1.DesktopClient) error {
		resp, err := c.Screenshot(ctx, &agentvmv1.ScreenshotRequest{MaxWidth: judgeScreenWidth})
		if err == nil {
			png = resp.GetPng()
		}
		return err
	})
	if err != nil {
		return nil
	}
	return png
}

// judgeModel is a client of the operator's gateway with owner's key, in its protocol.
func (a *Agent) judgeModel(ctx context.Context, owner string) (model.Provider, error) {
	var gw Gateway
	if a.Gateway != nil {
		gw = a.Gateway()
	}
	if _, err := gw.route(""); err != nil {
		return nil, newError(ErrTypeInvalidArgument, fmt.Errorf("the worker's agent configuration: %w", err))
	}
	var key string
	if gw.KeySecret != "" {
		var err error
		if key, err = a.Vault.Open(ctx, owner, gw.KeySecret); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, newError(ErrTypeInvalidArgument, fmt.Errorf("model key: no secret called %s", gw.KeySecret))
			}
			return nil, classify(fmt.Errorf("open model key %s: %w", gw.KeySecret, err))
		}
	}
	hc := &http.Client{Timeout: 5 * time.Minute}
	if a.DialGateway != nil {
		hc.Transport = &http.Transport{DialContext: a.DialGateway}
	}
	switch gw.Provider {
	case ProviderAnthropic:
		return model.NewAnthropic(gw.BaseURL, key, hc), nil
	case ProviderOpenAIResponses:
		return model.NewOpenAIResponses(gw.BaseURL, key, hc), nil
	}
	return model.NewOpenAI(gw.BaseURL, key, hc), nil
}

// oneLine is s on one line, cut to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
