package enginetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

// Exec implements runtime.Runtime with a few commands over the box's disk: echo, cat FILE,
// write FILE TEXT, sleep SECONDS, yes BYTES (writes that many bytes), true, false, pwd, env, and incr
// (bumps and prints the box's in-memory counter). Anything else is runtime.ErrBadCommand.
func (f *Runtime) Exec(ctx context.Context, id string, req runtime.ExecRequest) (int, error) {
	if err := f.enter(ctx, OpExec); err != nil {
		return 0, err
	}
	if len(req.Argv) == 0 {
		return 0, fmt.Errorf("%w: empty argv", runtime.ErrBadCommand)
	}
	f.mu.Lock()
	b, err := f.running(id)
	if err != nil {
		f.mu.Unlock()
		return 0, err
	}
	disk := filepath.Join(b.spec.Dir, "disk")
	f.execs++
	b.execs++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.execs--
		b.execs--
		f.mu.Unlock()
	}()

	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if st, err := os.Stat(filepath.Join(disk, filepath.Clean("/"+cwd))); err != nil || !st.IsDir() {
		return 0, fmt.Errorf("%w: cwd %q: no such directory", runtime.ErrBadCommand, cwd)
	}
	path := func(p string) string {
		if !strings.HasPrefix(p, "/") {
			p = cwd + "/" + p
		}
		return filepath.Join(disk, filepath.Clean("/"+p))
	}
	argv := req.Argv
	switch argv[0] {
	case "echo":
		_, err = fmt.Fprintln(req.Stdout, strings.Join(argv[1:], " "))
		return 0, err
	case "pwd":
		_, err = fmt.Fprintln(req.Stdout, cwd)
		return 0, err
	case "env":
		env := slices.Clone(req.Env)
		slices.Sort(env)
		for _, kv := range env {
			if _, err := fmt.Fprintln(req.Stdout, kv); err != nil {
				return 0, err
			}
		}
		return 0, nil
	case "true":
		return 0, nil
	case "false":
		return 1, nil
	case "incr":
		f.mu.Lock()
		b.mem++
		n := b.mem
		f.mu.Unlock()
		_, err = fmt.Fprintln(req.Stdout, n)
		return 0, err
	case "cat":
		if len(argv) != 2 {
			return 0, fmt.Errorf("%w: cat takes one file", runtime.ErrBadCommand)
		}
		data, err := os.ReadFile(path(argv[1]))
		if err != nil {
			fmt.Fprintf(req.Stderr, "cat: %s: No such file or directory\n", argv[1])
			return 1, nil
		}
		_, err = req.Stdout.Write(data)
		return 0, err
	case "write":
		if len(argv) != 3 {
			return 0, fmt.Errorf("%w: write takes a file and a text", runtime.ErrBadCommand)
		}
		p := path(argv[1])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return 1, nil
		}
		if err := os.WriteFile(p, []byte(argv[2]), 0o644); err != nil {
			return 1, nil
		}
		return 0, nil
	case "rm":
		if len(argv) != 2 {
			return 0, fmt.Errorf("%w: rm takes one file", runtime.ErrBadCommand)
		}
		if err := os.RemoveAll(path(argv[1])); err != nil {
			return 1, nil
		}
		return 0, nil
	case "sleep":
		d, err := seconds(argv)
		if err != nil {
			return 0, err
		}
		select {
		case <-time.After(d):
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err() // the child is killed
		}
	case "yes":
		n, err := strconv.Atoi(strings.Join(argv[1:], ""))
		if err != nil {
			return 0, fmt.Errorf("%w: yes takes a byte count", runtime.ErrBadCommand)
		}
		chunk := []byte(strings.Repeat("y", 64<<10))
		for n > 0 {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			k := min(n, len(chunk))
			if _, err := req.Stdout.Write(chunk[:k]); err != nil {
				return 0, err
			}
			n -= k
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: %s: executable file not found", runtime.ErrBadCommand, argv[0])
}

func seconds(argv []string) (time.Duration, error) {
	if len(argv) != 2 {
		return 0, fmt.Errorf("%w: sleep takes seconds", runtime.ErrBadCommand)
	}
	s, err := strconv.ParseFloat(argv[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%w: sleep: bad seconds %q", runtime.ErrBadCommand, argv[1])
	}
	return time.Duration(s * float64(time.Second)), nil
}
