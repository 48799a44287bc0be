package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// writeRuns is `agent ls`.
func writeRuns(w io.Writer, runs []*cbv1.AgentRun) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "No runs. Start one with: cocoonbox agent run BOX TASK")
		return err
	}
	tw := table(w)
	row(tw, "ID", "STATE", "MODEL", "CREATED", "ENDED", "TASK")
	for _, r := range runs {
		row(tw, r.GetId(), r.GetState(), r.GetModel(), when(r.GetCreatedAt()), when(r.GetEndedAt()), oneLine(r.GetTask(), 60))
	}
	return tw.Flush()
}

// writeRun is `agent show`: the run, then its steps as `agent watch` prints them.
func writeRun(w io.Writer, r *cbv1.AgentRun) error {
	tw := table(w)
	kv := func(k, v string) { row(tw, k+":", v) }
	kv("id", r.GetId())
	kv("box", r.GetBoxId())
	kv("state", r.GetState())
	if r.GetQuestion() != "" {
		kv("question", r.GetQuestion())
	}
	if r.GetError() != "" {
		kv("error", r.GetError())
	}
	kv("model", r.GetModel())
	kv("owner", r.GetOwner())
	kv("task", oneLine(r.GetTask(), 200))
	kv("steps", fmt.Sprint(r.GetStepsDone()))
	if tokens := fmt.Sprint(r.GetTokensUsed()); r.GetMaxTokens() > 0 {
		kv("tokens", fmt.Sprintf("%s of %d", tokens, r.GetMaxTokens()))
	} else {
		kv("tokens", tokens)
	}
	kv("created", when(r.GetCreatedAt()))
	kv("ended", when(r.GetEndedAt()))
	if rec := r.GetRecording(); rec != nil {
		kv("recording", fmt.Sprintf("%s in %d chunks; replay at /replay.html#/run/%s", humanBytes(rec.GetBytes()), rec.GetChunks(), r.GetId()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.GetPlan()) > 0 {
		fmt.Fprintln(w, "\nplan:")
		for _, it := range r.GetPlan() {
			fmt.Fprintf(w, "  %s %s\n", planMark(it.GetStatus()), oneLine(it.GetText(), 200))
		}
	}
	if len(r.GetSteps()) > 0 {
		fmt.Fprintln(w)
	}
	for _, s := range r.GetSteps() {
		if err := writeStep(w, s); err != nil {
			return err
		}
	}
	if r.GetState() == "succeeded" && r.GetResult() != "" {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.TrimRight(r.GetResult(), "\n"))
		return err
	}
	return nil
}

// writeStep is one step: "step N  summary", then what a person said to the agent at it and
// its tool calls, indented.
func writeStep(w io.Writer, s *cbv1.AgentStep) error {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d  %s\n", s.GetNumber(), s.GetSummary())
	if m := s.GetMessage(); m != "" {
		fmt.Fprintf(&b, "    you said: %s\n", oneLine(m, 100))
	}
	if q := s.GetQuestion(); q != "" {
		fmt.Fprintf(&b, "    asked you: %s\n", oneLine(q, 200))
	}
	for _, tc := range s.GetToolCalls() {
		fmt.Fprintf(&b, "    %s", tc.GetName())
		switch {
		case tc.GetIsError():
			fmt.Fprintf(&b, "  failed: %s", oneLine(tc.GetResult(), 100))
		case tc.GetImages() > 0:
			fmt.Fprintf(&b, "  %s", plural(int(tc.GetImages()), "image"))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRunEnd is the line that ends a followed run; a succeeded run's answer follows it when
// the last step's one line did not already show all of it.
func writeRunEnd(w io.Writer, r *cbv1.AgentRun) error {
	line := fmt.Sprintf("%s %s after %s", r.GetId(), r.GetState(), plural(int(r.GetStepsDone()), "step"))
	if r.GetError() != "" {
		line += ": " + r.GetError()
	}
	if _, err := fmt.Fprintln(w, line); err != nil {
		return err
	}
	if res := strings.TrimRight(r.GetResult(), "\n"); r.GetState() == "succeeded" && strings.Contains(res, "\n") {
		_, err := fmt.Fprintf(w, "\n%s\n", res)
		return err
	}
	return nil
}

// oneLine is s's first line, cut to n runes, marked when anything was left out.
func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	line, _, more := strings.Cut(s, "\n")
	if utf8.RuneCountInString(line) > n {
		line, more = string([]rune(line)[:n]), true
	}
	if more {
		line += "…"
	}
	return line
}

// plural is "1 step", "2 steps".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// planMark is a plan item's status as a checkbox.
func planMark(status string) string {
	switch status {
	case "done":
		return "[x]"
	case "doing":
		return "[>]"
	case "skipped":
		return "[-]"
	}
	return "[ ]"
}
