package devstack_test

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
)

// runScanned runs the package's tests while keeping a copy of everything the test binary
// prints (test logs, worker processes' stderr), then fails the run if that output holds a
// secret any stack handled. Only what is printed is there: `go test` without -v prints the
// t.Log lines of failed tests alone, so run with -v to scan every test's lines.
func runScanned(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cbscan-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "secret scan:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	stdout, err := tee(&os.Stdout, filepath.Join(dir, "stdout"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "secret scan:", err)
		return 1
	}
	stderr, err := tee(&os.Stderr, filepath.Join(dir, "stderr"))
	if err != nil {
		stdout()
		fmt.Fprintln(os.Stderr, "secret scan:", err)
		return 1
	}
	log.SetOutput(os.Stderr)
	code := m.Run()
	stdout()
	stderr()
	log.SetOutput(os.Stderr)

	handledMu.Lock()
	s := newScanner(handledSecrets)
	handledMu.Unlock()
	for _, f := range []string{"stdout", "stderr"} {
		if err := s.scanLines("test binary "+f, filepath.Join(dir, f)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	for _, h := range s.hits {
		fmt.Fprintf(os.Stderr, "FAIL: secret scan: %s\n", h)
		code = 1
	}
	return code
}

// tee replaces *f by a pipe whose bytes go on to the old *f and to a new file at path; the
// returned stop puts the old *f back once every byte written so far has gone through.
func tee(f **os.File, path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	orig := *f
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.MultiWriter(orig, out), r)
		close(done)
	}()
	*f = w
	return func() {
		*f = orig
		_ = w.Close()
		<-done
		_ = r.Close()
		_ = out.Close()
	}, nil
}
