package devstack_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// The session benchmarks run on one desktop box: a streamed command's time to its first byte,
// a keystroke's echo on a terminal, and a file each way through the agent, each beside the same
// thing done raw through the engine (its exec, its ports relay to a Perl server in the box).

// relayServers are Perl servers on the box's loopback for the raw figures (the desktop image has
// Perl, not Python): an echo on 8001, a sink on 8002 that answers "ok" after its client's EOF,
// on 8003 a source of copyBenchMiB MiB, and on 8004 a sink into a file on the box's disk.
const relayServers = `perl -MIO::Socket::INET -e '
sub serve { my ($port, $f) = @_; return if fork;
  my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 8, ReuseAddr => 1) or die $!;
  while (my $c = $s->accept) { $f->($c); close $c } }
serve(8001, sub { my $c = shift; my $b; while (sysread($c, $b, 65536)) { syswrite($c, $b) } });
serve(8002, sub { my $c = shift; my $b; 1 while sysread($c, $b, 1 << 20); syswrite($c, "ok") });
serve(8003, sub { my $c = shift; my $b = "x" x (1 << 20); for (1 .. $ENV{MIB}) { print $c $b } });
serve(8004, sub { my $c = shift; my $b; open(my $f, ">", "/home/user/raw.bin") or die $!;
  while (sysread($c, $b, 1 << 20)) { syswrite($f, $b) } close $f; syswrite($c, "ok") });
' </dev/null >/dev/null 2>&1 &`

// copyBenchMiB is the size of each file copy the benchmarks time; copyBenchRuns how many of them.
const (
	copyBenchMiB  = 1024
	copyBenchRuns = 3
)

func BenchmarkBoxSession(b *testing.B) {
	e := newDesktopBench(b)
	ctx := e.ctx
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.token)
	ref, err := e.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c", relayServers},
		Env: map[string]string{"MIB": fmt.Sprint(copyBenchMiB)}, TimeoutSeconds: 30}); err != nil {
		b.Fatal(err)
	}
	boxWaitFor(b, "the relay servers", func() bool {
		c, err := e.eng.DialPort(ctx, ref, 8001)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})

	b.Run("ExecFirstByte", func(b *testing.B) {
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			s := e.startShell(b, ctx, &cbv1.ShellStart{Argv: []string{"echo", "x"}, User: "root"})
			s.until("x")
			samples = append(samples, time.Since(start))
			if _, err := s.wait(); err != nil {
				b.Fatal(err)
			}
		}
		benchreport.Latency(b, samples)
	})
	b.Run("RawEngineExecEcho", func(b *testing.B) {
		timeCalls(b, func() error {
			res, err := e.eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"echo", "x"}})
			if err == nil && res.Stdout != "x\n" {
				err = fmt.Errorf("exec: %+v", res)
			}
			return err
		})
	})
	b.Run("KeystrokeEcho", func(b *testing.B) {
		s := e.startShell(b, ctx, &cbv1.ShellStart{Argv: []string{"cat"}, Tty: &cbv1.WindowSize{Rows: 24, Cols: 80}, User: "root"})
		var samples []time.Duration
		for b.Loop() {
			n := strings.Count(s.out.String(), "k")
			start := time.Now()
			s.send(&cbv1.ShellRequest{Stdin: []byte("k")})
			for strings.Count(s.out.String(), "k") <= n {
				if err := s.recv(); err != nil {
					b.Fatal(err)
				}
			}
			samples = append(samples, time.Since(start))
		}
		benchreport.Latency(b, samples)
		s.send(&cbv1.ShellRequest{Signal: "KILL"})
		_, _ = s.wait()
	})
	b.Run("RawRelayEcho", func(b *testing.B) {
		c, err := e.eng.DialPort(ctx, ref, 8001)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 1)
		timeCalls(b, func() error {
			if _, err := c.Write([]byte("k")); err != nil {
				return err
			}
			_, err := io.ReadFull(c, buf)
			return err
		})
	})

	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	const size = copyBenchMiB << 20
	copies := func(b *testing.B, one func() error) {
		var samples []time.Duration
		for range min(b.N, copyBenchRuns) {
			start := time.Now()
			if err := one(); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		benchreport.Throughput(b, size, samples)
	}
	b.Run("Upload1GiB", func(b *testing.B) {
		copies(b, func() error {
			up, err := e.api.UploadFile(actx)
			if err != nil {
				return err
			}
			if err := up.Send(&cbv1.UploadFileRequest{Box: string(e.id), Path: "/home/user/bench.bin", Size: size}); err != nil {
				return err
			}
			for sent := 0; sent < size; sent += len(chunk) {
				if up.Send(&cbv1.UploadFileRequest{Data: chunk}) != nil {
					break
				}
			}
			_, err = up.CloseAndRecv()
			return err
		})
	})
	b.Run("UploadHTTP1GiB", func(b *testing.B) {
		httpBase := "http" + strings.TrimPrefix(e.wsBase, "ws")
		copies(b, func() error {
			pr, pw := io.Pipe()
			go func() {
				for sent := 0; sent < size; sent += len(chunk) {
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
				_ = pw.Close()
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, httpBase+"/v1/boxes/"+string(e.id)+"/files/home/user/bench.bin", pr)
			if err != nil {
				return err
			}
			req.ContentLength = size
			req.Header.Set("Authorization", "Bearer "+e.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("PUT: %s: %s", resp.Status, body)
			}
			return nil
		})
	})
	b.Run("Download1GiB", func(b *testing.B) {
		copies(b, func() error {
			down, err := e.api.DownloadFile(actx, &cbv1.DownloadFileRequest{Box: string(e.id), Path: "/home/user/bench.bin"})
			if err != nil {
				return err
			}
			var n int
			for {
				msg, err := down.Recv()
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					return err
				}
				n += len(msg.GetData())
			}
			if n != size {
				return fmt.Errorf("downloaded %d bytes", n)
			}
			return nil
		})
	})
	relayUpload := func(port int) func() error {
		return func() error {
			c, err := e.eng.DialPort(ctx, ref, port)
			if err != nil {
				return err
			}
			defer c.Close()
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return err
				}
			}
			if err := c.CloseWrite(); err != nil {
				return err
			}
			ok, _ := io.ReadAll(c)
			if !bytes.Equal(ok, []byte("ok")) {
				return fmt.Errorf("the sink answered %q", ok)
			}
			return nil
		}
	}
	b.Run("RawRelayUpload1GiB", func(b *testing.B) { copies(b, relayUpload(8002)) })
	b.Run("RawRelayUploadToDisk1GiB", func(b *testing.B) { copies(b, relayUpload(8004)) })
	b.Run("RawRelayDownload1GiB", func(b *testing.B) {
		copies(b, func() error {
			c, err := e.eng.DialPort(ctx, ref, 8003)
			if err != nil {
				return err
			}
			defer c.Close()
			n, err := io.Copy(io.Discard, c)
			if err == nil && n != size {
				err = fmt.Errorf("the source sent %d bytes", n)
			}
			return err
		})
	})
}
