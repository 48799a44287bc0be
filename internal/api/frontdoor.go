package api

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// The front door: nothing unauthenticated costs more than a token lookup. Every RPC request
// (gRPC, Connect, gRPC-Web, JSON) is authorized from its headers before anything reads its
// body; only then is the body read, capped in its raw size (maxRequestBytes) and, for the
// transcoder, in the size it inflates to (maxMessageBytes, as gRPC's own MaxRecvMsgSize does).

// maxRequestBytes bounds an RPC request's body on the wire: one message of maxMessageBytes with
// room for its envelope.
const maxRequestBytes = maxMessageBytes + 64<<10

// rpcDoor authorizes an RPC request for its method before next (the gRPC server or the
// transcoder) reads a byte of its body, and hands the caller on in the request's context. A
// refusal is written in the request's own protocol, so every client reads it as usual.
func (s *Server) rpcDoor(next http.Handler) http.Handler {
	errw := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.URL.Path
		if isPublic(method) {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.authorize(r.Context(), httpBearer(r), method)
		if err != nil {
			s.refuseRPC(w, r, errw, method, err)
			return
		}
		// A client stream's body is a stream of messages (an upload, a shell's input), each one
		// capped by the gRPC server's message limit; any other body is one message.
		m := s.methods[method]
		if !m.IsClientStream {
			r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
		}
		if !m.IsClientStream && !m.IsServerStream {
			bodyDeadline(w, r)
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}

// refuseRPC answers a refused RPC request and counts it, under its method's name only when the
// method exists: a path is the caller's choice, and metrics must not grow with every path tried.
func (s *Server) refuseRPC(w http.ResponseWriter, r *http.Request, errw *connect.ErrorWriter, method string, err error) {
	st := toStatus(r.Context(), s.log, method, err)
	if _, ok := s.methods[method]; ok {
		s.metrics.observe(method, time.Now(), &st)
	}
	if !errw.IsSupported(r) {
		s.writeHTTPError(w, r, err)
		return
	}
	ce := connect.NewError(connect.Code(status.Code(st)), errors.New(status.Convert(st).Message()))
	_ = errw.Write(w, r, ce)
}

// limitedGzip inflates a request for the transcoder and fails once it passes maxMessageBytes,
// which the transcoder otherwise buffers without bound.
type limitedGzip struct {
	gz gzip.Reader
	n  int64
}

// errInflateLimit refuses a body that inflates past the message limit.
var errInflateLimit = connect.NewError(connect.CodeResourceExhausted,
	fmt.Errorf("the request inflates to more than the message limit of %d bytes", maxMessageBytes))

func (d *limitedGzip) Read(p []byte) (int, error) {
	n, err := d.gz.Read(p)
	d.n += int64(n)
	if d.n > maxMessageBytes {
		return n, errInflateLimit
	}
	return n, err
}

// Reset starts inflating r.
func (d *limitedGzip) Reset(r io.Reader) error {
	d.n = 0
	return d.gz.Reset(r)
}

// Close ends the stream.
func (d *limitedGzip) Close() error { return d.gz.Close() }

func newGzipCompressor() connect.Compressor { return gzip.NewWriter(io.Discard) }

func newLimitedGzip() connect.Decompressor { return &limitedGzip{} }

// methodKinds maps each registered method's full name to how it streams, for the routes that
// must know (a read deadline must not cut a stream, nor a body cap an upload).
func methodKinds(info map[string]grpc.ServiceInfo) map[string]grpc.MethodInfo {
	out := map[string]grpc.MethodInfo{}
	for svc, si := range info {
		for _, m := range si.Methods {
			out["/"+svc+"/"+m.Name] = m
		}
	}
	return out
}

// bodyDeadline gives a unary request's body bodyReadTimeout to arrive, then lifts the deadline
// once the body is read, so a slow sender cannot hold a request open but a long call (a create
// that waits for its box) is not cut. Streams and the desktop get no deadline at all.
func bodyDeadline(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(bodyReadTimeout)) != nil {
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}

// bodyReadTimeout is how long a unary request's body may take to arrive: the largest message at
// well under 1 MB/s.
const bodyReadTimeout = time.Minute

type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
