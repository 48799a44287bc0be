package image

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"base", "desktop"}) {
		t.Fatalf("Names() = %v", got)
	}
}

// TestRecipeHashMatchesBuildScript keeps the Go hash and build.sh's in step for every image: if
// they drift, the engine looks for an image directory that make image never creates.
func TestRecipeHashMatchesBuildScript(t *testing.T) {
	for _, name := range Names() {
		want, err := RecipeHash(name)
		if err != nil {
			t.Fatal(err)
		}
		// Run only build.sh's agent_sum and recipe_hash functions, from the source tree.
		script := `set -euo pipefail; here=$PWD; name=$1; ` +
			`eval "$(sed -n '/^agent_sum() {/,/^}/p;/^recipe_hash() {/,/^}/p' build.sh)"; recipe_hash`
		out, err := exec.Command("bash", "-c", script, "bash", name).Output()
		if err != nil {
			t.Fatalf("%s: run recipe_hash: %v", name, err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Fatalf("%s: build.sh hash %s, Go hash %s", name, got, want)
		}
	}
	if _, err := RecipeHash("../base"); err == nil {
		t.Fatal("path-like image name hashed")
	}
}

// TestAgentSumIsCurrent: the engine hashes image/agent.sum for the agent's source (go:embed
// cannot reach it), so the file must list what build.sh's agent_sum finds in the tree now, or
// the engine looks for an agent image that make image does not build.
func TestAgentSumIsCurrent(t *testing.T) {
	script := `set -euo pipefail; here=$PWD; ` +
		`eval "$(sed -n '/^agent_sum() {/,/^}/p' build.sh)"; agent_sum`
	out, err := exec.Command("bash", "-c", script).Output()
	if err != nil {
		t.Fatalf("run agent_sum: %v", err)
	}
	embedded, err := files.ReadFile("agent.sum")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(embedded) {
		t.Fatalf("image/agent.sum is stale (the agent's source changed): run go generate ./image or make image, then rebuild")
	}
	for _, want := range []string{"  cmd/cocoonbox-agent/main.go\n", "  agentvm/server.go\n", "  proto/agentvm/v1/agent.proto\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("agent_sum does not cover%s", strings.TrimSuffix(want, "\n"))
		}
	}
	if strings.Contains(string(out), "_test.go") {
		t.Error("agent_sum covers tests, which are not in the image")
	}
}

// TestAgentInRecipeHash: only images that ask for the agent change when its source does.
func TestAgentInRecipeHash(t *testing.T) {
	for name, want := range map[string]bool{"base": false, "desktop": true} {
		_, err := fs.Stat(files, name+"/agent")
		if got := err == nil; got != want {
			t.Errorf("%s: has the agent %v, want %v", name, got, want)
		}
	}
}

// debianName is what Debian policy allows as a package name.
var debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// TestRecipes checks what build.sh would only find out halfway through a build: package lists
// that do not parse, shell scripts with syntax errors, a customize.sh it would silently skip.
func TestRecipes(t *testing.T) {
	if err := exec.Command("bash", "-n", "build.sh").Run(); err != nil {
		t.Fatalf("bash -n build.sh: %v", err)
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(name, "packages"))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i, line := range strings.Split(string(b), "\n") {
				line, _, _ = strings.Cut(line, "#")
				for _, pkg := range strings.Fields(line) {
					if !debianName.MatchString(pkg) || seen[pkg] {
						t.Errorf("packages:%d: bad or repeated package name %q", i+1, pkg)
					}
					seen[pkg] = true
				}
			}
			if len(seen) == 0 {
				t.Error("packages names no package")
			}
			if b, err := os.ReadFile(filepath.Join(name, "suite")); err == nil {
				if f := strings.Fields(string(b)); len(f) < 1 || len(f) > 3 {
					t.Errorf("suite %q: want SUITE [MIRROR [COMPONENTS]]", b)
				}
			}
			scripts, _ := filepath.Glob(filepath.Join(name, "*.sh"))
			for _, s := range scripts {
				if out, err := exec.Command("bash", "-n", s).CombinedOutput(); err != nil {
					t.Errorf("bash -n %s: %v\n%s", s, err, out)
				}
				if fi, err := os.Stat(s); err != nil || fi.Mode().Perm()&0o111 == 0 {
					t.Errorf("%s is not executable (build.sh runs customize.sh only when it is)", s)
				}
			}
		})
	}
}

// TestDesktopBootHook: the desktop image installs its boot script where cocoonbox-init looks for
// a boot hook (bootHookPath in boxinit/boot_linux.go), and the script starts what the desktop
// tests and the ports relay expect.
func TestDesktopBootHook(t *testing.T) {
	custom, err := os.ReadFile("desktop/customize.sh")
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("boxinit/boot_linux.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"/etc/cocoonbox/boot"`} {
		if !strings.Contains(string(boot), want) {
			t.Fatalf("boxinit no longer looks for the boot hook at %s", want)
		}
	}
	if !strings.Contains(string(custom), `"$here/boot.sh" "$root/etc/cocoonbox/boot"`) {
		t.Fatal("desktop/customize.sh does not install boot.sh as /etc/cocoonbox/boot")
	}
	hook, err := os.ReadFile("desktop/boot.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/usr/local/bin/cocoonbox-agent serve", "--listen 127.0.0.1:7070",
		"--credential-file /run/cocoonbox/agent-credential", "/usr/local/bin/cocoonbox-desktop"} {
		if !strings.Contains(string(hook), want) {
			t.Errorf("desktop/boot.sh lacks %q", want)
		}
	}
	desktop, err := os.ReadFile("desktop/desktop.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"display=:0", "port=5900", "-SecurityTypes None", "-localhost", "startxfce4"} {
		if !strings.Contains(string(desktop), want) {
			t.Errorf("desktop/desktop.sh lacks %q", want)
		}
	}
}
