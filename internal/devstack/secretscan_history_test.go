package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// scanHistories looks for the needles in every event of every workflow execution, open or
// closed, in every namespace of the Temporal tc reaches: each event as the server stores it
// (protobuf, payloads as raw bytes), as JSON (bytes fields in base64, as the UI and
// `temporal workflow show` print them), and each payload decoded (JSON strings unescaped).
// It uses the stack's own client, so it reads whatever the stack's credentials can.
func (s *scanner) scanHistories(ctx context.Context, tc client.Client) (workflows int, err error) {
	svc := tc.WorkflowService()
	var nsToken []byte
	for {
		nss, err := svc.ListNamespaces(ctx, &workflowservice.ListNamespacesRequest{PageSize: 100, NextPageToken: nsToken})
		if err != nil {
			return workflows, fmt.Errorf("secret scan: list namespaces: %w", err)
		}
		for _, ns := range nss.GetNamespaces() {
			n, err := s.scanNamespace(ctx, svc, ns.GetNamespaceInfo().GetName())
			workflows += n
			if err != nil {
				return workflows, err
			}
		}
		if nsToken = nss.GetNextPageToken(); len(nsToken) == 0 {
			return workflows, nil
		}
	}
}

func (s *scanner) scanNamespace(ctx context.Context, svc workflowservice.WorkflowServiceClient, ns string) (workflows int, err error) {
	var token []byte
	for {
		page, err := svc.ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: ns, PageSize: 1000, NextPageToken: token})
		if err != nil {
			return workflows, fmt.Errorf("secret scan: list workflows of namespace %s: %w", ns, err)
		}
		for _, ex := range page.GetExecutions() {
			if err := s.scanHistory(ctx, svc, ns, ex.GetExecution()); err != nil {
				return workflows, err
			}
			workflows++
		}
		if token = page.GetNextPageToken(); len(token) == 0 {
			return workflows, nil
		}
	}
}

func (s *scanner) scanHistory(ctx context.Context, svc workflowservice.WorkflowServiceClient, ns string, ex *commonpb.WorkflowExecution) error {
	where := fmt.Sprintf("namespace %s workflow %s run %s", ns, ex.GetWorkflowId(), ex.GetRunId())
	var token []byte
	for {
		page, err := svc.GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
			Namespace: ns, Execution: ex, MaximumPageSize: 1000, NextPageToken: token,
			HistoryEventFilterType: enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT,
		})
		if err != nil {
			return fmt.Errorf("secret scan: history of %s: %w", where, err)
		}
		events := page.GetHistory().GetEvents()
		for _, blob := range page.GetRawHistory() { // servers configured to send history as stored
			s.scan(where+" raw history blob", blob.GetData())
			var h historypb.History
			if err := proto.Unmarshal(blob.GetData(), &h); err != nil {
				return fmt.Errorf("secret scan: decode raw history of %s: %w", where, err)
			}
			events = append(events, h.GetEvents()...)
		}
		for _, ev := range events {
			if err := s.scanEvent(fmt.Sprintf("%s event %d %s", where, ev.GetEventId(), ev.GetEventType()), ev); err != nil {
				return err
			}
		}
		if token = page.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

func (s *scanner) scanEvent(where string, ev *historypb.HistoryEvent) error {
	raw, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("secret scan: encode %s: %w", where, err)
	}
	s.scan(where+" (protobuf)", raw)
	js, err := protojson.Marshal(ev)
	if err != nil {
		return fmt.Errorf("secret scan: encode %s as json: %w", where, err)
	}
	s.scan(where+" (json)", js)
	var ps []*commonpb.Payload
	payloadsOf(ev.ProtoReflect(), &ps)
	for _, p := range ps {
		if text := decodedPayload(p); text != "" {
			s.scan(where+" (decoded payload)", []byte(text))
		}
	}
	return nil
}

// payloadsOf appends every Payload inside m, at any depth (inputs, results, failure details,
// memos, headers, search attributes), to out.
func payloadsOf(m protoreflect.Message, out *[]*commonpb.Payload) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		*out = append(*out, p)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					payloadsOf(mv.Message(), out)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					payloadsOf(v.List().Get(i).Message(), out)
				}
			}
		case fd.Message() != nil:
			payloadsOf(v.Message(), out)
		}
		return true
	})
}

// decodedPayload returns the strings of a JSON payload, unescaped, one a line ("" for a payload
// that is not JSON: its bytes are already in the event's protobuf as they are).
func decodedPayload(p *commonpb.Payload) string {
	if !strings.HasPrefix(string(p.GetMetadata()["encoding"]), "json/") {
		return ""
	}
	var v any
	if err := json.Unmarshal(p.GetData(), &v); err != nil {
		return ""
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
			b.WriteByte('\n')
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				b.WriteString(k)
				b.WriteByte('\n')
				walk(e)
			}
		}
	}
	walk(v)
	return b.String()
}
