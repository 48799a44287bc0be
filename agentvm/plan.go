package agentvm

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/loomhand/cocoonbox/agentvm/model"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// GUIPlan is the tool through which the model keeps a visible plan: the whole checklist, written
// again each time it changes, which people following the run see beside the desktop.
const GUIPlan = "gui_plan"

// Bounds of a plan.
const (
	maxPlanItems = 30
	maxPlanText  = 200
)

// Plan item states.
var planStates = []string{"todo", "doing", "done", "skipped"}

var guiPlanTool = model.Tool{
	Name: GUIPlan,
	Description: "Write your plan for the task as a checklist the person following the run sees beside the " +
		"desktop: the whole list each time, with each item's status (todo, doing, done, skipped). Write it " +
		"at the start of a task of several steps and again when an item's status changes.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","minItems":1,"maxItems":30,` +
		`"items":{"type":"object","properties":{"text":{"type":"string","minLength":1,"maxLength":200},` +
		`"status":{"type":"string","enum":["todo","doing","done","skipped"]}},"required":["text","status"],` +
		`"additionalProperties":false}}},"required":["items"],"additionalProperties":false}`),
}

// plan reads a gui_plan call into the step's plan; a bad one is a message for the model instead.
func plan(args json.RawMessage) (items []*agentvmv1.PlanItem, refusal string) {
	var in struct {
		Items []struct {
			Text   string `json:"text"`
			Status string `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, `gui_plan: arguments must be {"items": [{"text": "...", "status": "todo"}, ...]}`
	}
	if len(in.Items) == 0 || len(in.Items) > maxPlanItems {
		return nil, fmt.Sprintf("gui_plan: items: from 1 to %d, got %d", maxPlanItems, len(in.Items))
	}
	for i, it := range in.Items {
		text := strings.TrimSpace(it.Text)
		switch {
		case text == "" || len(text) > maxPlanText || !utf8.ValidString(text):
			return nil, fmt.Sprintf("gui_plan: items[%d].text: must be 1 to %d bytes of text", i, maxPlanText)
		case !validPlanState(it.Status):
			return nil, fmt.Sprintf("gui_plan: items[%d].status: must be one of %s, got %q", i, strings.Join(planStates, ", "), it.Status)
		}
		items = append(items, &agentvmv1.PlanItem{Text: text, Status: it.Status})
	}
	return items, ""
}

func validPlanState(s string) bool {
	for _, ok := range planStates {
		if s == ok {
			return true
		}
	}
	return false
}

// planSummary is what the model is told after writing its plan.
func planSummary(items []*agentvmv1.PlanItem) string {
	done := 0
	for _, it := range items {
		if it.GetStatus() == "done" || it.GetStatus() == "skipped" {
			done++
		}
	}
	return fmt.Sprintf("plan shown: %d items, %d done or skipped", len(items), done)
}
