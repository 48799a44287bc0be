package wire_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/wire"
)

// TestBootScriptMatches: the desktop image's boot script, which cannot import this package,
// starts the agent on the port and credential file the control plane uses.
func TestBootScriptMatches(t *testing.T) {
	b, err := os.ReadFile("../../image/desktop/boot.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--listen 127.0.0.1:" + strconv.Itoa(wire.AgentPort) + " ",
		"--credential-file " + wire.CredentialPath + " ",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("image/desktop/boot.sh does not pass %q", want)
		}
	}
}
