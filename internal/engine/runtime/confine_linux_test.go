package runtime

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// buildProbe builds testdata/probe, a static program that tries from inside a box what a box
// must not do to its host.
func buildProbe(t *testing.T) []byte {
	t.Helper()
	if goruntime.GOARCH != "amd64" {
		t.Fatalf("the probe's bpf syscall number is amd64's; this is %s", goruntime.GOARCH)
	}
	out := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProcessBoxConfinement: root in a process-runtime box is not root on the host. It cannot
// change the host kernel's settings (core_pattern, sysrq), read its memory or keys, load a
// module, use bpf, mount, or make namespaces of its own, and it runs in a user namespace.
func TestProcessBoxConfinement(t *testing.T) {
	probe := buildProbe(t)
	e := newTestEnv(t, NameProcess)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	var out, errOut strings.Builder
	code, err := e.rt.Exec(ctx, b.ID, ExecRequest{
		Argv:   []string{"sh", "-c", "cat > /tmp/probe && chmod +x /tmp/probe && /tmp/probe"},
		Stdin:  strings.NewReader(string(probe)),
		Stdout: &out, Stderr: &errOut,
	})
	if err != nil || code != 0 {
		t.Fatalf("probe: code %d, %v, stderr %q", code, err, errOut.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	t.Logf("probe:\n%s", out.String())
	denied := func(name string, ok ...string) {
		t.Helper()
		for _, want := range ok {
			if got[name] == want {
				return
			}
		}
		t.Errorf("%s: %q, want one of %q", name, got[name], ok)
	}
	// A kernel built without a file has nothing to reach there; a box must not see one the host has.
	hostless := func(path string) string {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "ENOENT"
		}
		return "(the host has " + path + ")"
	}
	denied("write_core_pattern", "EROFS", "EACCES", "EPERM")
	denied("write_sysrq_trigger", "EROFS", "EACCES", "EPERM", hostless("/proc/sysrq-trigger"))
	denied("read_kcore", "empty", "EACCES", "EPERM", hostless("/proc/kcore"))
	denied("read_keys", "empty", "EACCES", "EPERM")
	denied("finit_module", "EPERM")
	denied("bpf", "EPERM")
	denied("mount_tmpfs", "EPERM")
	denied("unshare_user", "EPERM")
	denied("keyctl", "EPERM")
	if f := strings.Fields(got["uid_map"]); len(f) != 3 || f[0] != "0" || f[1] == "0" {
		t.Errorf("uid_map %q: box root must map to an unprivileged host uid", got["uid_map"])
	}
}
