package cocoonbox_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/loomhand/cocoonbox"

// pkg is one package of the module as go list sees it, tests included.
type pkg struct {
	path        string
	imports     []string // direct imports of the package
	testImports []string // direct imports of its tests
	deps        []string // everything the package (not its tests) builds on
}

// listPackages lists every package of the module with its imports and dependencies.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	const format = `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}|{{join .Deps " "}}`
	out, err := exec.Command("go", "list", "-f", format, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), "|", 4)
		if len(parts) != 4 {
			t.Fatalf("go list line %q", sc.Text())
		}
		p := pkg{path: strings.TrimPrefix(strings.TrimPrefix(parts[0], module), "/"),
			imports: strings.Fields(parts[1]), testImports: strings.Fields(parts[2]), deps: strings.Fields(parts[3])}
		pkgs[p.path] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// own is the module-relative path of an import of the module, or "", false.
func own(imp string) (string, bool) {
	switch {
	case imp == module:
		return "", true
	case strings.HasPrefix(imp, module+"/"):
		return strings.TrimPrefix(imp, module+"/"), true
	}
	return "", false
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// TestImportRules holds the layout's import rules (DESIGN.md §4, and the box link's): each
// breaks the build of this test, naming the package and the import.
func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range pkgs {
		for i, imp := range append(p.imports, p.testImports...) {
			rel, ok := own(imp)
			if !ok || imp == p.path {
				continue
			}
			test := i >= len(p.imports) // the rules of the layout bind the package; these also its tests
			switch {
			case p.path == "" && !test && imp != module:
				t.Errorf("the root package imports %s: it holds the domain vocabulary only", rel)
			case p.path == "workflows" && !test && imp != module && rel != "activities":
				t.Errorf("workflows imports %s: only the root package and activities", rel)
			case under(p.path, "activities") && under(rel, "workflows"):
				t.Errorf("%s imports %s: activities never import workflows", p.path, rel)
			case under(p.path, "internal/api") && (under(rel, "internal/engine") || under(rel, "internal/sandbox")):
				t.Errorf("%s imports %s: the API reaches boxes through boxsvc only", p.path, rel)
			case under(p.path, "internal/boxsvc") && under(rel, "activities"):
				t.Errorf("%s imports %s: boxsvc reaches boxes through boxlink and workflows through their client", p.path, rel)
			case under(p.path, "agentvm") && !test && imp != module && !under(rel, "agentvm") && !under(rel, "proto/agentvm"):
				t.Errorf("%s imports %s: the in-box agent builds on its own proto only", p.path, rel)
			}
		}
	}
	for _, p := range pkgs {
		for _, dep := range p.deps {
			rel, mine := own(dep)
			switch {
			case p.path == "agentvm/wire" && (mine || !isStd(dep)):
				t.Errorf("agentvm/wire depends on %s: it must import nothing, so both sides of the box can", dep)
			case under(p.path, "internal/boxlink") && strings.HasPrefix(dep, "go.temporal.io/"):
				t.Errorf("%s depends on %s: the box link has no Temporal dependency", p.path, dep)
			case strings.HasPrefix(dep, "go.temporal.io/server") && !slices.Contains([]string{"internal/devstack", "cmd/cocoonbox"}, p.path):
				t.Errorf("%s builds the Temporal server (%s): only cocoonbox dev embeds it", p.path, dep)
			case under(p.path, "agentvm") && mine && !under(rel, "agentvm") && !under(rel, "proto/agentvm"):
				t.Errorf("%s depends on %s: the in-box agent builds on its own proto only", p.path, rel)
			case rel == "agentvm/agentvmtest" && !strings.HasSuffix(p.path, "test"):
				t.Errorf("%s depends on %s: the fake agent is for tests and test helpers only", p.path, rel)
			}
		}
	}
}

// isStd reports whether an import path is the standard library's (no dot in its first element).
func isStd(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}
