package api

import (
	"context"
	"encoding/json"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// fuzzRequests are the request messages a Connect/JSON body is decoded into, by index.
var fuzzRequests = []proto.Message{
	&cbv1.CreateBoxRequest{}, &cbv1.WriteFileRequest{}, &cbv1.ExecRequest{}, &cbv1.ShareBoxRequest{},
	&cbv1.CreateTokenRequest{}, &cbv1.StartRunRequest{}, &cbv1.DesktopTicketRequest{}, &cbv1.SetSecretRequest{},
}

// FuzzConnectJSON feeds request bodies to the transcoder's JSON decoding (the strict codec):
// any body either decodes or is refused as the client's mistake (invalid argument), never a
// panic or another code.
func FuzzConnectJSON(f *testing.F) {
	codec := strictJSON{&vanguard.JSONCodec{UnmarshalOptions: protojson.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}}}
	f.Add(uint8(0), []byte(`{"name":"dev","size":"small"}`))
	f.Add(uint8(1), []byte(`{"box":"dev","path":"/tmp/x","content":"aGk=","mode":420}`))
	f.Add(uint8(2), []byte(`{"box":"dev","argv":["sh","-c","ls"],"timeoutSeconds":60}`))
	f.Fuzz(func(t *testing.T, i uint8, body []byte) {
		msg := fuzzRequests[int(i)%len(fuzzRequests)].ProtoReflect().New().Interface()
		if err := codec.Unmarshal(body, msg); err != nil && connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("decode %q: %v, want invalid argument", body, err)
		}
	})
}

// FuzzMCPToolCall feeds tool calls with arbitrary arguments to the MCP server: each gets a
// JSON-RPC answer, never a panic. The server has no box service, so what is fuzzed is the
// decoding and schema validation of the arguments up to the tool's handler.
func FuzzMCPToolCall(f *testing.F) {
	s := New(Options{})
	m := s.mcpServer()
	var names []string
	for _, t := range s.mcpTools() {
		names = append(names, t.tool.Name)
	}
	ctx := withPrincipal(context.Background(), Principal{User: store.User{ID: "usr_1"}, Token: store.Token{ID: "tok_1", Scope: store.ScopeMCP}})
	f.Add(uint8(4), []byte(`{"box":"dev","argv":["uname","-a"],"timeout_seconds":5}`))
	f.Add(uint8(6), []byte(`{"box":"dev","path":"/tmp/x","content":"hi","mode":"0644"}`))
	f.Add(uint8(1), []byte(`{"name":"dev","size":"huge"}`))
	f.Fuzz(func(t *testing.T, i uint8, args []byte) {
		var raw json.RawMessage = args
		if !json.Valid(args) {
			raw, _ = json.Marshal(string(args))
		}
		msg, _ := json.Marshal(map[string]any{
			"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": names[int(i)%len(names)], "arguments": raw},
		})
		if resp := m.HandleMessage(ctx, msg); resp == nil {
			t.Fatalf("no answer to %s", msg)
		}
	})
}
