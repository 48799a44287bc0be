package sandboxtest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ports serves the ports relay. Boxes share the host's network, so a box's 127.0.0.1:{port} is
// the host's. The Upgrade header is checked before anything wakes the box: a bare GET must not.
func (f *Fake) ports(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, false)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, "port must be between 1 and 65535")
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		writeError(w, http.StatusUpgradeRequired, "the ports relay needs Upgrade: tcp")
		return
	}
	if err := f.awaken(s); err != nil {
		writeError(w, http.StatusBadGateway, "guest unreachable: "+err.Error())
		return
	}
	guest, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("guest unreachable on port %d", port))
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = guest.Close()
		writeError(w, http.StatusInternalServerError, "relay: "+err.Error())
		return
	}
	_, err = io.WriteString(client, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n")
	if err != nil {
		_ = client.Close()
		_ = guest.Close()
		return
	}
	pipe(client, brw.Reader, guest)
}

// pipe copies both ways, passing each EOF on as a half-close so either side can finish sending
// and keep reading; it returns when both directions are done.
func pipe(client net.Conn, fromClient *bufio.Reader, guest net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(guest, fromClient) // drains bytes the client sent behind its request first
		closeWrite(guest)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, guest)
		closeWrite(client)
	}()
	wg.Wait()
	_ = client.Close()
	_ = guest.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}
