package worker

import "testing"

// TestWants: a webhook hears the actions it names and the families it names, nothing else.
func TestWants(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		action   string
		want     bool
	}{
		{[]string{"box.hibernated"}, "box.hibernated", true},
		{[]string{"box.hibernated"}, "box.woke", false},
		{[]string{"box.*"}, "box.sealed", true},
		{[]string{"box.*"}, "run.finished", false},
		{[]string{"run.*"}, "runner.x", false}, // a family is its dotted prefix, not any prefix
		{[]string{"box.*", "run.finished"}, "run.finished", true},
		{nil, "box.create", false},
	} {
		if got := wants(tc.patterns, tc.action); got != tc.want {
			t.Errorf("wants(%q, %q) = %v, want %v", tc.patterns, tc.action, got, tc.want)
		}
	}
}
