//go:build !linux

package agentvm

import "net"

// serveFileLink refuses file links off Linux, where the agent writes no files (files_linux.go
// holds the file calls): the control plane then sends a file over gRPC, which says so.
func (s *Server) serveFileLink(c net.Conn) {
	_, _ = c.Write([]byte("ERR file links are served by the Linux agent only\n"))
	_ = c.Close()
}
