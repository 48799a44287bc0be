package agentvm

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/loomhand/cocoonbox/agentvm/model"
)

// AskUser is the tool through which the model asks the run's starter a question. The loop
// answers it itself, never at once: the step ends with the question, the run waits for the
// person, and the next step carries the answer as the call's result.
const AskUser = "ask_user"

// maxQuestion bounds a question, in bytes.
const maxQuestion = 2000

// askUserTool is AskUser as the model sees it.
var askUserTool = model.Tool{
	Name: AskUser,
	Description: "Ask the person who gave you the task a question, and wait for their answer, which " +
		"comes back as this tool's result. Ask when the task is ambiguous, when you need something " +
		"only they know, or before something that cannot be undone; do not guess instead. The run " +
		"pauses until they answer, so ask everything you need in one question.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","minLength":1,` +
		`"maxLength":2000,"description":"The question, in plain words, with the choices if there are any."}},` +
		`"required":["question"],"additionalProperties":false}`),
}

// question reads an ask_user call's question; a bad one is a message for the model instead.
func question(args json.RawMessage) (q, refusal string) {
	var in struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return "", "ask_user: arguments must be {\"question\": \"...\"}"
	}
	q = strings.TrimSpace(in.Question)
	switch {
	case q == "":
		return "", "ask_user: question is required"
	case len(q) > maxQuestion || !utf8.ValidString(q):
		return "", "ask_user: question must be valid text of at most 2000 bytes"
	}
	return q, ""
}

// Answered is how the person's answer reads as the result of the model's ask_user call.
const Answered = "The person answered: "

// pendingAsk is the ID of the conversation's ask_user call that has no result yet, or "": the
// question the previous step ended with.
func pendingAsk(conv []model.Message) string {
	for i := len(conv) - 1; i >= 0; i-- {
		m := conv[i]
		if m.Role != model.RoleAssistant {
			continue
		}
		for _, c := range m.ToolCalls {
			if c.Name != AskUser {
				continue
			}
			answered := false
			for _, later := range conv[i+1:] {
				answered = answered || (later.Role == model.RoleTool && later.ToolCallID == c.ID)
			}
			if !answered {
				return c.ID
			}
		}
		return "" // only the newest model turn can be waiting
	}
	return ""
}
