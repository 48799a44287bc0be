package activities_test

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/activities"
)

// TestHostname: a box's hostname is its name made one DNS label, or box- and the end of its ID.
func TestHostname(t *testing.T) {
	for name, want := range map[string]string{
		"dev-fork-1":                   "dev-fork-1",
		"My Box (2)":                   "my-box-2",
		"--ünïcode__box--":             "n-code-box",
		"日本":                           "box-00000001",
		"":                             "box-00000001",
		strings.Repeat("ab", 40):       strings.Repeat("ab", 31) + "a",
		strings.Repeat("a", 62) + " b": strings.Repeat("a", 62),
	} {
		if got := activities.Hostname(name, "bx_0000000000000001"); got != want {
			t.Errorf("Hostname(%q) = %q, want %q", name, got, want)
		}
	}
}
