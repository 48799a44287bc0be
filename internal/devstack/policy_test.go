package devstack_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestBoxPolicy: a box's owner changes its policy through the API one field at a time, the rest
// staying as it was; a shorter idle period moves the box's idle deadline at once; bad input is
// refused naming the field and changes nothing.
func TestBoxPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	e, ctx, tok := hostileEnv(t, boxConfig(t))
	as := e.as(ctx, tok)
	b, err := e.box.CreateBox(as, &cbv1.CreateBoxRequest{Name: "policy", Size: "small"})
	if err != nil {
		t.Fatal(err)
	}
	id := b.GetId()
	same := func(what string, got, want *cbv1.BoxPolicy) {
		t.Helper()
		if !proto.Equal(got, want) {
			t.Fatalf("%s: policy %v, want %v", what, got, want)
		}
	}
	same("a new box", b.GetPolicy(), &cbv1.BoxPolicy{IdleSeconds: 900, KeepSnapshots: 5})

	b, err = e.box.SetPolicy(as, &cbv1.SetPolicyRequest{Box: id, KeepSnapshots: proto.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	same("keep 3", b.GetPolicy(), &cbv1.BoxPolicy{IdleSeconds: 900, KeepSnapshots: 3})

	before := time.Now()
	b, err = e.box.SetPolicy(as, &cbv1.SetPolicyRequest{Box: id, IdleSeconds: proto.Int64(60), Durable: proto.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	want := &cbv1.BoxPolicy{IdleSeconds: 60, Durable: true, KeepSnapshots: 3}
	same("idle 60 s, durable", b.GetPolicy(), want)
	if dl := b.GetIdleDeadline().AsTime(); dl.Before(before) || dl.After(time.Now().Add(61*time.Second)) {
		t.Errorf("idle deadline %v after a change to 60 s at %v", dl, before)
	}

	for _, tc := range []struct {
		req   *cbv1.SetPolicyRequest
		field string
	}{
		{&cbv1.SetPolicyRequest{IdleSeconds: proto.Int64(-5)}, "idle_seconds"},
		{&cbv1.SetPolicyRequest{IdleSeconds: proto.Int64(30)}, "idle_seconds"},
		{&cbv1.SetPolicyRequest{IdleSeconds: proto.Int64(1 << 50)}, "idle_seconds"},
		{&cbv1.SetPolicyRequest{KeepSnapshots: proto.Int32(0)}, "keep_snapshots"},
		{&cbv1.SetPolicyRequest{KeepSnapshots: proto.Int32(1001)}, "keep_snapshots"},
		{&cbv1.SetPolicyRequest{}, "policy"},
	} {
		tc.req.Box = id
		_, err := e.box.SetPolicy(as, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
			t.Errorf("SetPolicy(%v) = %v; want invalid naming %s", tc.req, err, tc.field)
		}
	}
	b, err = e.box.GetBox(as, &cbv1.GetBoxRequest{Box: id})
	if err != nil {
		t.Fatal(err)
	}
	same("after the refusals", b.GetPolicy(), want)
}
