package devstack_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// cli is the cocoonbox binary the tests run, built once per test binary (removed by TestMain).
var cli struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildCLI builds the cocoonbox binary, as a person installs it, the first time a test asks, and
// returns its path.
func buildCLI(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() {
		if cli.dir, cli.err = os.MkdirTemp("", "cbcli-"); cli.err != nil {
			return
		}
		cli.path = filepath.Join(cli.dir, "cocoonbox")
		began := time.Now()
		if out, err := exec.Command("go", "build", "-o", cli.path, "github.com/loomhand/cocoonbox/cmd/cocoonbox").CombinedOutput(); err != nil {
			cli.err = fmt.Errorf("build the CLI: %v\n%s", err, out)
			return
		}
		t.Logf("built cocoonbox in %v", time.Since(began).Round(time.Millisecond))
	})
	if cli.err != nil {
		t.Fatal(cli.err)
	}
	return cli.path
}

// removeCLI removes what buildCLI built.
func removeCLI() {
	if cli.dir != "" {
		_ = os.RemoveAll(cli.dir)
	}
}

// tmuxPane is a terminal a test types into as a person would: a tmux server of its own (its own
// socket, killed at the end, failed or not) with one pane running a local bash.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func newTmuxPane(t *testing.T, dir string, env []string, cols, rows int) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed: run make deps")
	}
	p := &tmuxPane{t: t, sock: filepath.Join(dir, "tmux.sock")}
	// No history file: bash writes it as the cleanup kills tmux, into the directory being removed.
	shell := "env -i " + strings.Join(env, " ") + " HISTFILE= bash --norc --noprofile"
	p.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), shell)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", p.sock, "kill-server").Run() })
	p.tmux("set-option", "-g", "status", "off")
	return p
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// typeLine types line and Enter.
func (p *tmuxPane) typeLine(line string) {
	p.t.Helper()
	p.tmux("send-keys", "-t", "t", "-l", line)
	p.tmux("send-keys", "-t", "t", "Enter")
}

// screen is what the pane shows, with its scrollback.
func (p *tmuxPane) screen() string {
	return p.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-500")
}

// waitFor waits until the pane shows a match of re, and returns the match.
func (p *tmuxPane) waitFor(ctx context.Context, re string, within time.Duration) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(within)
	for {
		s := strings.TrimRight(p.screen(), "\n") // the rows below the cursor are empty
		if m := rx.FindString(s); m != "" {
			return m
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.t.Fatalf("the terminal never showed %q; it shows:\n%s", re, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// size is the pane's rows and columns, as stty prints them.
func (p *tmuxPane) size() string {
	return strings.TrimSpace(p.tmux("display-message", "-p", "-t", "t", "#{pane_height} #{pane_width}"))
}

// testShellInTmux is box shell, box exec and box cp from a terminal a person uses: the CLI built as
// shipped, typed into tmux.
func testShellInTmux(t *testing.T, e *desktopEnv) {
	dir := shortTemp(t)
	env := []string{"PATH=" + filepath.Dir(buildCLI(t)) + ":/usr/bin:/bin", "HOME=" + dir, "TERM=xterm-256color", "PS1='local$ '",
		"COCOONBOX_ENDPOINT=" + e.d.URLs().API, "COCOONBOX_TOKEN=" + e.token}
	p := newTmuxPane(t, dir, env, 100, 30)
	defer func() {
		_ = os.WriteFile(filepath.Join(t.ArtifactDir(), "terminal.txt"), []byte(p.screen()), 0o644)
	}()
	ctx := e.ctx
	p.waitFor(ctx, `local\$\s*$`, 10*time.Second)
	p.typeLine("stty -g > " + dir + "/before")

	// A login shell in the box, on this terminal, of its size, then of a new one.
	p.typeLine("cocoonbox box shell desk")
	p.waitFor(ctx, `user@[^:]+:~\$\s*$`, time.Minute)
	p.typeLine("stty size")
	p.waitFor(ctx, "(?m)^"+regexp.QuoteMeta(p.size())+"$", 10*time.Second)
	p.tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
	if got := p.size(); got != "40 120" {
		t.Fatalf("tmux pane is %q after the resize", got)
	}
	p.typeLine("clear; stty size")
	p.waitFor(ctx, `(?m)^40 120$`, 10*time.Second)

	// Ctrl-C interrupts what runs in the box, not the CLI.
	p.typeLine("sleep 100")
	time.Sleep(500 * time.Millisecond)
	p.tmux("send-keys", "-t", "t", "C-c")
	p.typeLine("echo after-$((40+2))")
	p.waitFor(ctx, `(?m)^after-42$`, 10*time.Second)

	// exit 3 comes back as the CLI's status, on a terminal as it was.
	p.typeLine("exit 3")
	p.waitFor(ctx, `local\$\s*$`, 10*time.Second)
	p.typeLine(`echo "status=$?"; [ "$(stty -g)" = "$(cat ` + dir + `/before)" ] && echo terminal-restored`)
	p.waitFor(ctx, `(?m)^status=3$`, 10*time.Second)
	p.waitFor(ctx, `(?m)^terminal-restored$`, 5*time.Second)

	// box cp shows progress on the terminal and copies byte-exact; box exec takes a file on
	// stdin far past the old cap; cp -r copies a tree both ways.
	p.typeLine("clear; head -c 100000000 /dev/urandom > " + dir + "/f && cocoonbox box cp " + dir + "/f desk:/tmp/f && echo up-done")
	p.waitFor(ctx, `(?m)^up-done$`, 2*time.Minute)
	p.waitFor(ctx, `100%`, time.Second)
	p.typeLine("cocoonbox box cp desk:/tmp/f " + dir + "/g && cmp " + dir + "/f " + dir + "/g && echo same-bytes")
	p.waitFor(ctx, `(?m)^same-bytes$`, 2*time.Minute)
	p.typeLine("cocoonbox box exec desk -- wc -c < " + dir + "/f")
	p.waitFor(ctx, `(?m)^100000000$`, time.Minute)
	p.typeLine("mkdir -p " + dir + "/tree/a/b " + dir + "/tree/empty && echo hi > " + dir + "/tree/a/b/c.txt && ln -s b/c.txt " + dir + "/tree/a/link" +
		" && cocoonbox box cp -r " + dir + "/tree desk:/home/user/tree && cocoonbox box cp -r desk:/home/user/tree " + dir + "/back" +
		" && diff -r --no-dereference " + dir + "/tree " + dir + "/back && echo same-tree")
	p.waitFor(ctx, `(?m)^same-tree$`, time.Minute)
}
