package api

import (
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// newConnectHandler serves the gRPC server's services to browsers over Connect, gRPC-Web and
// Connect's JSON. The front door authorizes each call before the transcoder reads it; the
// transcoder turns it into a gRPC call on s.grpc, so the same interceptors see and count it and
// no route reaches a service around them. The transcoder buffers messages, so both the buffer
// and what a gzip body inflates to are capped at the gRPC server's message limit.
func (s *Server) newConnectHandler() http.Handler {
	h, err := vanguardgrpc.NewTranscoder(s.grpc,
		// JSON requests are strict: a misspelt field is an error naming it, not silently ignored.
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			return strictJSON{&vanguard.JSONCodec{
				MarshalOptions:   protojson.MarshalOptions{Resolver: res, EmitUnpopulated: true},
				UnmarshalOptions: protojson.UnmarshalOptions{Resolver: res},
			}}
		}),
		vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(maxMessageBytes)),
		vanguard.WithCompression("gzip", newGzipCompressor, newLimitedGzip),
	)
	if err != nil {
		// Every service is registered from generated code, so their schemas always resolve.
		panic("api: build the connect transcoder: " + err.Error())
	}
	return connectUnaryByDefault(s.rpcDoor(h))
}

// connectUnaryByDefault marks a plain POST of application/json (or application/proto) as a
// Connect unary call. The Connect protocol makes its version header optional, and a browser's
// fetch or curl rarely sends it; without it the transcoder would take the call for REST, which
// this API does not map, and answer 404.
func connectUnaryByDefault(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.Method == http.MethodPost && r.Header.Get("Connect-Protocol-Version") == "" &&
			(ct == "application/json" || ct == "application/proto" || strings.HasPrefix(ct, "application/json;")) {
			r.Header.Set("Connect-Protocol-Version", "1")
		}
		next.ServeHTTP(w, r)
	})
}

// strictJSON is the JSON codec with unknown fields refused, and a request body that does not
// parse answered as the client's mistake (invalid argument), not the transcoder's (unknown).
type strictJSON struct {
	*vanguard.JSONCodec
}

// Unmarshal decodes a request, naming what is wrong with it.
func (c strictJSON) Unmarshal(data []byte, msg proto.Message) error {
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
}
