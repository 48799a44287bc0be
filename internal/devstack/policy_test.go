package devstack_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loomhand/cocoonbox/internal/testutil"
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
	same("a new box", b.GetPolicy(), &cbv1.BoxPolicy{IdleSeconds: 900, Durable: true, SnapshotEverySeconds: 1800, KeepSnapshots: 5, LeaseIdleSeconds: 120})

	b, err = e.box.SetPolicy(as, &cbv1.SetPolicyRequest{Box: id, KeepSnapshots: proto.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	same("keep 3", b.GetPolicy(), &cbv1.BoxPolicy{IdleSeconds: 900, Durable: true, SnapshotEverySeconds: 1800, KeepSnapshots: 3, LeaseIdleSeconds: 120})

	before := time.Now()
	b, err = e.box.SetPolicy(as, &cbv1.SetPolicyRequest{Box: id, IdleSeconds: proto.Int64(60), Durable: proto.Bool(false), SnapshotEverySeconds: proto.Int64(3600)})
	if err != nil {
		t.Fatal(err)
	}
	want := &cbv1.BoxPolicy{IdleSeconds: 60, Durable: false, SnapshotEverySeconds: 3600, KeepSnapshots: 3, LeaseIdleSeconds: 120}
	same("idle 60 s, not durable, snapshot every hour", b.GetPolicy(), want)
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
		{&cbv1.SetPolicyRequest{SnapshotEverySeconds: proto.Int64(-1)}, "snapshot_every_seconds"},
		{&cbv1.SetPolicyRequest{SnapshotEverySeconds: proto.Int64(60)}, "snapshot_every_seconds"},
		{&cbv1.SetPolicyRequest{LeaseIdleSeconds: proto.Int64(0)}, "lease_idle_seconds"},
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

	// The user's defaults: a new box starts with them over the server's; the box above keeps its.
	def, err := e.box.SetPolicyDefaults(as, &cbv1.SetPolicyDefaultsRequest{IdleSeconds: proto.Int64(3600), KeepSnapshots: proto.Int32(7)})
	if err != nil {
		t.Fatal(err)
	}
	mine := &cbv1.BoxPolicy{IdleSeconds: 3600, Durable: true, SnapshotEverySeconds: 1800, KeepSnapshots: 7, LeaseIdleSeconds: 120}
	same("the defaults", def, mine)
	if _, err := e.box.SetPolicyDefaults(as, &cbv1.SetPolicyDefaultsRequest{Durable: proto.Bool(false), RecordRuns: proto.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	mine.Durable, mine.RecordRuns = false, true
	if def, err = e.box.GetPolicyDefaults(as, &cbv1.GetPolicyDefaultsRequest{}); err != nil {
		t.Fatal(err)
	}
	same("the defaults after a second change", def, mine)
	nb, err := e.box.CreateBox(as, &cbv1.CreateBoxRequest{Name: "policy-two", Size: "small"})
	if err != nil {
		t.Fatal(err)
	}
	same("a box created after the defaults", nb.GetPolicy(), mine)
	if b, err = e.box.GetBox(as, &cbv1.GetBoxRequest{Box: id}); err != nil {
		t.Fatal(err)
	}
	same("the box created before them", b.GetPolicy(), want)
	if _, err := e.box.SetPolicyDefaults(as, &cbv1.SetPolicyDefaultsRequest{IdleSeconds: proto.Int64(-60)}); status.Code(err) != codes.InvalidArgument ||
		!strings.HasPrefix(status.Convert(err).Message(), "idle_seconds:") {
		t.Errorf("a negative idle default: %v; want invalid naming idle_seconds", err)
	}
}

// TestBoxEvents: what a user and the box's own workflow did reaches ListEvents in order, the
// user's hibernate beside the workflow's record of it with its reason and the seal that followed;
// after_id follows from
// the last event seen; bad input names the field.
func TestBoxEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	e, ctx, tok := hostileEnv(t, boxConfig(t))
	as := e.as(ctx, tok)
	b, err := e.box.CreateBox(as, &cbv1.CreateBoxRequest{Name: "events", Size: "small"})
	if err != nil {
		t.Fatal(err)
	}
	id := b.GetId()
	if _, err := e.box.HibernateBox(as, &cbv1.HibernateBoxRequest{Box: id}); err != nil {
		t.Fatal(err)
	}
	actions := func(events []*cbv1.BoxEvent) string {
		var s []string
		for _, ev := range events {
			s = append(s, ev.GetActor()+" "+ev.GetAction()+" "+ev.GetDetail())
		}
		return strings.Join(s, "\n")
	}
	var events []*cbv1.BoxEvent
	testutil.Eventually(t, time.Minute, "the hibernate's events", func() bool {
		resp, err := e.box.ListEvents(as, &cbv1.ListEventsRequest{Box: id})
		if err != nil {
			t.Fatal(err)
		}
		events = resp.GetEvents()
		got := actions(events)
		return strings.Contains(got, "box.create") && strings.Contains(got, "box.hibernate ") &&
			strings.Contains(got, `worker box.hibernated {"detail": "requested by admin"}`) && strings.Contains(got, "worker box.sealed ")
	})
	for i := 1; i < len(events); i++ {
		if events[i].GetId() <= events[i-1].GetId() || events[i].GetAt().AsTime().Before(events[i-1].GetAt().AsTime()) {
			t.Fatalf("events out of order:\n%s", actions(events))
		}
	}
	last := events[len(events)-1].GetId()
	if resp, err := e.box.ListEvents(as, &cbv1.ListEventsRequest{Box: id, AfterId: last}); err != nil || len(resp.GetEvents()) != 0 {
		t.Fatalf("after the last event: %v, %v", resp, err)
	}
	if _, err := e.box.SetPolicy(as, &cbv1.SetPolicyRequest{Box: id, KeepSnapshots: proto.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	// A user's change is recorded beside the answer (boxsvc's later), not before it: wait for
	// the one event, then check nothing else came with it.
	var after []*cbv1.BoxEvent
	testutil.Eventually(t, 30*time.Second, "the policy change's event", func() bool {
		resp, err := e.box.ListEvents(as, &cbv1.ListEventsRequest{Box: id, AfterId: last})
		if err != nil {
			t.Fatal(err)
		}
		after = resp.GetEvents()
		return len(after) > 0
	})
	if len(after) != 1 || after[0].GetAction() != "box.setpolicy" {
		t.Fatalf("after a policy change: %v", actions(after))
	}
	if resp, err := e.box.ListEvents(as, &cbv1.ListEventsRequest{Box: id, Limit: 1}); err != nil || len(resp.GetEvents()) != 1 || resp.GetEvents()[0].GetAction() != "box.setpolicy" {
		t.Fatalf("the newest one: %v, %v", resp, err)
	}
	// A watch carries the events as they come: the wake's, after the first message.
	wctx, stop := context.WithTimeout(as, time.Minute)
	defer stop()
	watch, err := e.box.WatchBox(wctx, &cbv1.WatchBoxRequest{Box: id})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || len(first.GetEvents()) != 0 {
		t.Fatalf("the first watch message: %v, %v; want the status alone", first, err)
	}
	if _, err := e.box.WakeBox(as, &cbv1.WakeBoxRequest{Box: id}); err != nil {
		t.Fatal(err)
	}
	var heard []string
	for !slices.Contains(heard, "box.woke") {
		m, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch after the wake: %v; heard %q", err, heard)
		}
		for _, ev := range m.GetEvents() {
			heard = append(heard, ev.GetAction())
		}
	}
	stop()

	for field, req := range map[string]*cbv1.ListEventsRequest{
		"limit":    {Box: id, Limit: 1001},
		"after_id": {Box: id, AfterId: -1},
	} {
		if _, err := e.box.ListEvents(as, req); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), field+":") {
			t.Errorf("ListEvents(%v) = %v; want invalid naming %s", req, err, field)
		}
	}
}
