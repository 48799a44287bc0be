package rfb

import (
	"bytes"
	"sync"
)

// Session is the state one connection's two halves share. The server's half
// can only be framed knowing what the client said: the protocol version it
// chose decides the security handshake, and the pixel format it set decides
// the size of every pixel. FilterClient records both as it forwards them and
// FilterServer reads them.
type Session struct {
	mode Mode

	versioned chan struct{} // closed once the client's version is known or its half ended
	once      sync.Once

	mu          sync.Mutex
	clientMinor int    // 0: the client ended before sending a version
	serverPF    []byte // ServerInit's pixel format
	clientPF    []byte // the client's last SetPixelFormat, nil before one
	requested   bool   // a FramebufferUpdateRequest has reached the server
}

// NewSession returns the shared state of one connection in mode.
func NewSession(mode Mode) *Session {
	return &Session{mode: mode, versioned: make(chan struct{})}
}

// setClientVersion publishes the version the client chose.
func (s *Session) setClientVersion(minor int) {
	s.mu.Lock()
	s.clientMinor = minor
	s.mu.Unlock()
	s.once.Do(func() { close(s.versioned) })
}

// clientDone unblocks a server half waiting for a version that will not come.
func (s *Session) clientDone() { s.once.Do(func() { close(s.versioned) }) }

// waitClientVersion returns the client's version, or 0 if it ended without one.
func (s *Session) waitClientVersion() int {
	<-s.versioned
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientMinor
}

// setPixelFormat records the client's SetPixelFormat (wire form, 16 bytes).
// Without Fence the edge cannot tell which update the server encodes in the
// new format, so once the server has been asked for an update a View client
// may only repeat the format in use: changing it then could desynchronise
// the edge's framing from the server's and let a clipboard message through
// as pixels.
func (s *Session) setPixelFormat(pf []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != Control && s.requested {
		cur := s.clientPF
		if cur == nil {
			cur = s.serverPF
		}
		if cur == nil || !bytes.Equal(cur[:13], pf[:13]) {
			return refusef("SetPixelFormat after the first FramebufferUpdateRequest is not allowed for view clients")
		}
	}
	s.clientPF = bytes.Clone(pf)
	return nil
}

// setServerPixelFormat records ServerInit's pixel format (16 bytes).
func (s *Session) setServerPixelFormat(pf []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serverPF = bytes.Clone(pf)
}

// markRequested notes that an update request is on its way to the server.
func (s *Session) markRequested() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requested = true
}

// pixelFormat returns the format the server encodes updates in.
func (s *Session) pixelFormat() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clientPF != nil {
		return s.clientPF
	}
	return s.serverPF
}
