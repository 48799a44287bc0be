package conformance

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// relayServer is a TCP server run inside the box with perl (perl-base is in every Debian and
// Ubuntu image). It listens on a free loopback port, which it writes to the file named by its
// second argument, and serves connections one after another in one of two modes:
//   - echo: send back everything received; on EOF from the client, shut down its write side.
//   - greet: send "hello\n" and shut down its write side at once, then read until EOF and
//     write what it got to the file named by the third argument.
const relayServer = `
use strict; use IO::Socket::INET;
my ($mode, $portfile, $out) = @ARGV;
my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 8, ReuseAddr => 1, Proto => "tcp") or die "listen: $!";
open(my $pf, ">", "$portfile.tmp") or die; print $pf $l->sockport(), "\n"; close $pf; rename("$portfile.tmp", $portfile) or die;
while (my $c = $l->accept) {
  my $buf;
  if ($mode eq "echo") {
    while (sysread($c, $buf, 65536)) { my $o = 0; while ($o < length $buf) { my $n = syswrite($c, $buf, length($buf) - $o, $o); defined $n or last; $o += $n } }
    shutdown($c, 1);
  } else {
    syswrite($c, "hello\n"); shutdown($c, 1);
    my $all = ""; while (sysread($c, $buf, 65536)) { $all .= $buf }
    open(my $fh, ">", "$out.tmp") or die; print $fh $all; close $fh; rename("$out.tmp", $out) or die;
  }
  close $c;
}`

// startRelayServer starts relayServer in the box and returns its port.
func (s *suite) startRelayServer(t *testing.T, sb sandbox.SandboxRef, mode string) int {
	t.Helper()
	portFile, out := "/tmp/relay-"+mode+".port", "/tmp/relay-"+mode+".got"
	s.shEnv(t, sb, fmt.Sprintf(`nohup perl -e "$RELAY_SERVER" %s %s %s >/tmp/relay-%s.log 2>&1 </dev/null &`, mode, portFile, out, mode),
		map[string]string{"RELAY_SERVER": relayServer})
	var port int
	testutil.EventuallyReports(t, 30*time.Second, mode+" server listening", func() (bool, string) {
		got := strings.TrimSpace(s.sh(t, sb, "cat "+portFile+" 2>/dev/null; cat /tmp/relay-"+mode+".log"))
		n, err := strconv.Atoi(got)
		port = n
		return err == nil && n > 0, fmt.Sprintf("%q", got)
	})
	return port
}

// relay checks the ports relay as a byte pipe with half-close both ways: the client sends EOF and
// reads the whole answer after it; the server sends EOF first and still reads what the client
// writes after that.
func (s *suite) relay(t *testing.T) {
	t.Parallel()
	c := s.h.Root
	sb := s.claim(t, "relay")

	port := s.startRelayServer(t, sb.SandboxRef, "echo")
	conn, err := c.DialPort(s.ctx(t), sb.SandboxRef, port)
	if err != nil {
		t.Fatalf("dial echo server: %v", err)
	}
	defer conn.Close()
	payload := make([]byte, 256<<10)
	_, _ = rand.Read(payload)
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(payload)
		if err == nil {
			err = conn.CloseWrite()
		}
		wrote <- err
	}()
	_ = conn.SetReadDeadline(time.Now().Add(s.h.CallTimeout))
	echoed, err := io.ReadAll(conn) // to EOF: the server saw our EOF and sent its own
	if err := <-wrote; err != nil {
		t.Fatalf("write then half-close: %v", err)
	}
	if err != nil || !bytes.Equal(echoed, payload) {
		t.Fatalf("echo after client half-close: %d of %d bytes back, %v", len(echoed), len(payload), err)
	}

	port = s.startRelayServer(t, sb.SandboxRef, "greet")
	conn2, err := c.DialPort(s.ctx(t), sb.SandboxRef, port)
	if err != nil {
		t.Fatalf("dial greet server: %v", err)
	}
	defer conn2.Close()
	_ = conn2.SetReadDeadline(time.Now().Add(s.h.CallTimeout))
	greeting, err := io.ReadAll(conn2) // the server half-closed after its greeting
	if err != nil || string(greeting) != "hello\n" {
		t.Fatalf("greeting up to the server's EOF: %q, %v", greeting, err)
	}
	msg := "after-eof-" + s.run
	if _, err := io.WriteString(conn2, msg); err != nil {
		t.Fatalf("write after the server's half-close: %v", err)
	}
	if err := conn2.CloseWrite(); err != nil {
		t.Fatalf("half-close: %v", err)
	}
	testutil.EventuallyReports(t, 30*time.Second, "server receives what was sent after its EOF", func() (bool, string) {
		got := s.sh(t, sb.SandboxRef, "cat /tmp/relay-greet.got 2>/dev/null; true")
		return got == msg, fmt.Sprintf("%q", got)
	})

	// Nothing listens on port 1 in a fresh box: the relay says the guest is unreachable (502).
	if conn, err := c.DialPort(s.ctx(t), sb.SandboxRef, 1); err == nil {
		conn.Close()
		t.Errorf("dial a port nobody listens on: connected, want an error")
	} else if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("dial a port nobody listens on: %v, want %v", err, sandbox.ErrUnavailable)
	}
}

// relayBareGET checks that a relay request without the Upgrade header is 426 and, on a hibernated
// sandbox, does not wake it (it would consume the hibernate image for nothing).
func (s *suite) relayBareGET(t *testing.T) {
	t.Parallel()
	ref := s.ref("relay-bare")
	sb := s.claim(t, "relay-bare")
	path := "/v1/sandboxes/" + sb.ID + "/ports/8080"
	if status, msg := s.raw(t, http.MethodGet, path, sb.Token, nil, nil); status != http.StatusUpgradeRequired || msg == "" {
		t.Fatalf("bare GET on the relay: %d %q, want 426 with an error body", status, msg)
	}
	if err := s.h.Root.Hibernate(s.ctx(t), sb.SandboxRef); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if status, msg := s.raw(t, http.MethodGet, path, sb.Token, nil, nil); status != http.StatusUpgradeRequired || msg == "" {
		t.Fatalf("bare GET on a hibernated sandbox's relay: %d %q, want 426 with an error body", status, msg)
	}
	if row, ok := s.row(t, ref, sb.ID); !ok || !row.Hibernated {
		t.Fatalf("after a bare relay GET the listing shows %+v (listed %v), want still hibernated", row, ok)
	}
}
