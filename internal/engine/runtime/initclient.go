package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// killGrace is how long Exec waits for the init to confirm a kill before giving up on it.
const killGrace = 2 * time.Second

// execOver runs req through a connection to the box's init (boxproto) and returns the exit
// code. Both runtimes use it; they differ only in how they reach the init. A cancelled ctx
// kills the command's process group and returns ctx's error. Stdin, when given, is read by a
// goroutine that may outlive the call if the reader blocks.
func execOver(ctx context.Context, c net.Conn, req ExecRequest) (int, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return -1, fmt.Errorf("%w: empty argv", ErrBadCommand)
	}
	var wmu sync.Mutex
	send := func(typ byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return boxproto.WriteFrame(c, typ, p)
	}
	r, err := json.Marshal(boxproto.Request{Version: boxproto.Version, Argv: req.Argv, Cwd: req.Cwd, Env: req.Env})
	if err != nil {
		return -1, fmt.Errorf("encode exec request: %w", err)
	}
	if err := send(boxproto.TypeRequest, r); err != nil {
		return -1, fmt.Errorf("send exec request: %w", err)
	}
	// Errors sending stdin are not the command's fate: the init may already have answered (a
	// missing binary) and closed; what it said is read below.
	if req.Stdin == nil {
		_ = send(boxproto.TypeStdinEOF, nil)
	} else {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := req.Stdin.Read(buf)
				if n > 0 && send(boxproto.TypeStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(boxproto.TypeStdinEOF, nil)
					return
				}
			}
		}()
	}
	stop := context.AfterFunc(ctx, func() {
		_ = send(boxproto.TypeKill, nil)
		_ = c.SetReadDeadline(time.Now().Add(killGrace))
	})
	defer stop()

	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	for {
		typ, p, err := boxproto.ReadFrame(c)
		if ctx.Err() != nil {
			return -1, fmt.Errorf("exec %s: %w", req.Argv[0], ctx.Err())
		}
		if err != nil {
			return -1, fmt.Errorf("exec %s: read from box init: %w", req.Argv[0], err)
		}
		switch typ {
		case boxproto.TypeStdout, boxproto.TypeStderr:
			w := stdout
			if typ == boxproto.TypeStderr {
				w = stderr
			}
			if _, err := w.Write(p); err != nil {
				// The engine's writer refuses more (its output cap): stop the command now.
				_ = send(boxproto.TypeKill, nil)
				return -1, fmt.Errorf("exec %s: write output: %w", req.Argv[0], err)
			}
		case boxproto.TypeExit:
			var ex boxproto.Exit
			if err := json.Unmarshal(p, &ex); err != nil {
				return -1, fmt.Errorf("exec %s: decode exit: %w", req.Argv[0], err)
			}
			return ex.Code, nil
		case boxproto.TypeFailure:
			var f boxproto.Failure
			if err := json.Unmarshal(p, &f); err != nil {
				return -1, fmt.Errorf("exec %s: decode failure: %w", req.Argv[0], err)
			}
			switch f.Kind {
			case boxproto.FailBadCommand, boxproto.FailBadCwd:
				return -1, fmt.Errorf("%w: %s", ErrBadCommand, f.Message)
			}
			return -1, fmt.Errorf("exec %s: box init: %s: %s", req.Argv[0], f.Kind, f.Message)
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
