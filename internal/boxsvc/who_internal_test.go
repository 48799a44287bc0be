package boxsvc

import (
	"context"
	"testing"
)

// TestWhoTakesTheFrontDoorsName: a box's events name the caller by the name the front door read
// with their token, and never by a name it read for someone else.
func TestWhoTakesTheFrontDoorsName(t *testing.T) {
	s := &Service{} // no store: a name not in ctx comes out as the ID
	ctx := WithCallerName(context.Background(), "usr_alice", "alice")
	if got := s.who(ctx, "usr_alice"); got != "alice" {
		t.Errorf("who(alice) = %q, want alice", got)
	}
	if got := s.who(ctx, "usr_bob"); got != "usr_bob" {
		t.Errorf("who(bob) under alice's name = %q, want bob's ID", got)
	}
	if got := s.who(WithCallerName(context.Background(), "usr_bob", ""), "usr_bob"); got != "usr_bob" {
		t.Errorf("who(bob) with an empty name = %q, want bob's ID", got)
	}
}
