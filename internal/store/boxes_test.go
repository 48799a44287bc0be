package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func newUser(t *testing.T, st *store.Store, name string) string {
	t.Helper()
	u, err := st.CreateUser(context.Background(), store.NewUser{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func newBox(t *testing.T, st *store.Store, owner, name string) store.Box {
	t.Helper()
	b, err := st.CreateBox(context.Background(), store.NewBox{ID: cocoonbox.NewBoxID(), Owner: owner, Name: name, Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCreateBox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")

	nb := store.NewBox{ID: cocoonbox.NewBoxID(), Owner: alice, Name: "dev", Size: cocoonbox.SizeMedium}
	b, err := st.CreateBox(ctx, nb)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != nb.ID || b.Owner != alice || b.Name != "dev" || b.Size != cocoonbox.SizeMedium ||
		b.State != cocoonbox.BoxStateCreating || b.SandboxID != "" || b.DeletedAt != nil || b.CreatedAt.IsZero() {
		t.Errorf("CreateBox = %+v", b)
	}
	if again, err := st.CreateBox(ctx, nb); err != nil || again != b {
		t.Errorf("repeated CreateBox = %+v, %v; want the first row %+v", again, err, b)
	}
	if got, err := st.BoxByID(ctx, nb.ID); err != nil || got != b {
		t.Errorf("BoxByID = %+v, %v", got, err)
	}

	conflicts := map[string]store.NewBox{
		"same ID, other owner": {ID: nb.ID, Owner: bob, Name: "dev", Size: cocoonbox.SizeMedium},
		"same ID, other name":  {ID: nb.ID, Owner: alice, Name: "dev2", Size: cocoonbox.SizeMedium},
		"same ID, other size":  {ID: nb.ID, Owner: alice, Name: "dev", Size: cocoonbox.SizeLarge},
		"taken name":           {ID: cocoonbox.NewBoxID(), Owner: alice, Name: "dev", Size: cocoonbox.SizeSmall},
	}
	for what, nb := range conflicts {
		if _, err := st.CreateBox(ctx, nb); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", what, err)
		}
	}
	// Names are per owner.
	if _, err := st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: bob, Name: "dev", Size: cocoonbox.SizeSmall}); err != nil {
		t.Errorf("another owner's box with the same name: %v", err)
	}

	invalid := map[string]store.NewBox{
		"bad ID":   {ID: "bx_1", Owner: alice, Name: "x", Size: cocoonbox.SizeSmall},
		"bad name": {ID: cocoonbox.NewBoxID(), Owner: alice, Name: "-x", Size: cocoonbox.SizeSmall},
		"bad size": {ID: cocoonbox.NewBoxID(), Owner: alice, Name: "x", Size: "huge"},
		"no owner": {ID: cocoonbox.NewBoxID(), Name: "x", Size: cocoonbox.SizeSmall},
	}
	for what, nb := range invalid {
		_, err := st.CreateBox(ctx, nb)
		if !errors.Is(err, store.ErrInvalid) || cocoonbox.ErrorCode(err) != cocoonbox.EInvalid {
			t.Errorf("%s: %v, want ErrInvalid and a cocoonbox invalid error", what, err)
		}
	}
	if _, err := st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: "usr_nobody", Name: "x", Size: cocoonbox.SizeSmall}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown owner: %v, want ErrNotFound", err)
	}
	if _, err := st.BoxByID(ctx, cocoonbox.NewBoxID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BoxByID of an unknown box: %v, want ErrNotFound", err)
	}
}

func TestBoxLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, bob := newUser(t, st, "alice"), newUser(t, st, "bob")
	first := newBox(t, st, alice, "first")
	second := newBox(t, st, alice, "second")
	newBox(t, st, bob, "bobs")

	list := func(withDeleted bool) []cocoonbox.BoxID {
		t.Helper()
		var boxes []store.Box
		var err error
		if withDeleted {
			boxes, err = st.ListBoxesWithDeleted(ctx, alice)
		} else {
			boxes, err = st.ListBoxes(ctx, alice)
		}
		if err != nil {
			t.Fatal(err)
		}
		ids := []cocoonbox.BoxID{}
		for _, b := range boxes {
			ids = append(ids, b.ID)
		}
		return ids
	}
	if got := list(false); len(got) != 2 || got[0] != second.ID || got[1] != first.ID {
		t.Errorf("ListBoxes = %v, want [%s %s] (newest first)", got, second.ID, first.ID)
	}
	if got, err := st.ListBoxes(ctx, "usr_nobody"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListBoxes of nobody = %#v, %v; want an empty list", got, err)
	}

	// running with a sandbox, then failed with a reason, then running again clears the reason.
	if err := st.SetBoxState(ctx, first.ID, cocoonbox.BoxStateRunning, "sb-1", ""); err != nil {
		t.Fatal(err)
	}
	if err := st.SetBoxState(ctx, first.ID, cocoonbox.BoxStateFailed, "", "engine lost the sandbox"); err != nil {
		t.Fatal(err)
	}
	b, err := st.BoxByID(ctx, first.ID)
	if err != nil || b.State != cocoonbox.BoxStateFailed || b.Reason != "engine lost the sandbox" || b.SandboxID != "sb-1" ||
		!b.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("after failing: %+v, %v", b, err)
	}
	if err := st.SetBoxState(ctx, first.ID, cocoonbox.BoxStateRunning, "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := st.BoxByID(ctx, first.ID); b.Reason != "" || b.SandboxID != "sb-1" {
		t.Errorf("after recovering: %+v, want no reason and the same sandbox", b)
	}

	if err := st.SetBoxState(ctx, first.ID, "asleep", "", ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unknown state: %v, want ErrInvalid", err)
	}
	if err := st.SetBoxState(ctx, second.ID, cocoonbox.BoxStateRunning, "sb-1", ""); !errors.Is(err, store.ErrConflict) {
		t.Errorf("another live box's sandbox: %v, want ErrConflict", err)
	}
	if err := st.SetBoxState(ctx, cocoonbox.NewBoxID(), cocoonbox.BoxStateRunning, "", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown box: %v, want ErrNotFound", err)
	}

	if err := st.MarkBoxDeleted(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkBoxDeleted(ctx, first.ID); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
	if b, _ := st.BoxByID(ctx, first.ID); b.State != cocoonbox.BoxStateDeleted || b.DeletedAt == nil {
		t.Errorf("deleted box = %+v", b)
	}
	if got := list(false); len(got) != 1 || got[0] != second.ID {
		t.Errorf("ListBoxes after delete = %v, want [%s]", got, second.ID)
	}
	if got := list(true); len(got) != 2 {
		t.Errorf("ListBoxesWithDeleted = %v, want both", got)
	}
	if err := st.SetBoxState(ctx, first.ID, cocoonbox.BoxStateRunning, "", ""); !errors.Is(err, store.ErrConflict) {
		t.Errorf("reviving a deleted box: %v, want ErrConflict", err)
	}
	if err := st.MarkBoxDeleted(ctx, cocoonbox.NewBoxID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting an unknown box: %v, want ErrNotFound", err)
	}
	// A deleted box frees its name and its sandbox; its ID stays taken.
	if _, err := st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: alice, Name: "first", Size: cocoonbox.SizeSmall}); err != nil {
		t.Errorf("reusing a deleted box's name: %v", err)
	}
	if err := st.SetBoxState(ctx, second.ID, cocoonbox.BoxStateRunning, "sb-1", ""); err != nil {
		t.Errorf("reusing a deleted box's sandbox ID: %v", err)
	}
	if _, err := st.CreateBox(ctx, store.NewBox{ID: first.ID, Owner: alice, Name: "first", Size: cocoonbox.SizeSmall}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("recreating a deleted box's ID: %v, want ErrConflict", err)
	}
}

func TestSandboxTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	keys, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	tokens := store.SandboxTokens{Store: st, Keys: keys}
	alice := newUser(t, st, "alice")
	b, other := newBox(t, st, alice, "dev"), newBox(t, st, alice, "other")

	if _, err := tokens.SandboxToken(ctx, string(b.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("before any token: %v, want ErrNotFound", err)
	}
	const token = "sbx-token-0123456789"
	// The node a redirected claim named comes back with the sandbox, so calls go there.
	sb1 := sandbox.SandboxRef{ID: "sb-1", Token: token, Addr: "node-b:7777"}
	if err := tokens.PutSandboxToken(ctx, string(b.ID), sb1); err != nil {
		t.Fatal(err)
	}
	if got, err := tokens.SandboxToken(ctx, string(b.ID)); err != nil || got != sb1 {
		t.Errorf("SandboxToken = %+v, %v; want %+v", got, err, sb1)
	}
	if got, _ := st.BoxByID(ctx, b.ID); got.SandboxID != "sb-1" {
		t.Errorf("box sandbox = %q, want sb-1", got.SandboxID)
	}

	// What the table holds is a ciphertext, and it opens only as this box's token.
	var stored []byte
	if err := conn.QueryRow(ctx, `SELECT sandbox_token_ciphertext FROM boxes WHERE id = $1`, string(b.ID)).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 || bytes.Contains(stored, []byte(token)) {
		t.Errorf("stored ciphertext %x holds the token", stored)
	}
	if err := st.SetSandboxToken(ctx, other.ID, "sb-2", "", "", stored); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.SandboxToken(ctx, string(other.ID)); !errors.Is(err, secrets.ErrAuth) {
		t.Errorf("a token copied to another box: %v, want secrets.ErrAuth", err)
	}

	// A new sandbox drops the old sandbox's token; deleting the box drops the token.
	if err := st.SetBoxState(ctx, b.ID, cocoonbox.BoxStateRunning, "sb-1", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := tokens.SandboxToken(ctx, string(b.ID)); err != nil || got != sb1 {
		t.Errorf("same sandbox kept: %+v, %v; want %+v", got, err, sb1)
	}
	if err := st.SetBoxState(ctx, b.ID, cocoonbox.BoxStateRunning, "sb-3", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.SandboxToken(ctx, string(b.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a new sandbox: %v, want ErrNotFound", err)
	}
	var addr string
	if err := conn.QueryRow(ctx, `SELECT sandbox_addr FROM boxes WHERE id = $1`, string(b.ID)).Scan(&addr); err != nil || addr != "" {
		t.Errorf("after a new sandbox, the old one's node = %q, %v; want none", addr, err)
	}
	if err := tokens.PutSandboxToken(ctx, string(b.ID), sandbox.SandboxRef{ID: "sb-3", Token: "t3"}); err != nil {
		t.Fatal(err)
	}
	// The new sandbox is on the configured engine: the old one's node is not carried over.
	if got, err := tokens.SandboxToken(ctx, string(b.ID)); err != nil || got.Addr != "" {
		t.Errorf("new sandbox: %+v, %v; want no node address", got, err)
	}
	// A sandbox on a registered node is found at the address the node's record has now, so a
	// node whose address changes keeps its boxes; a node with no record leaves the address
	// empty (the configured engine).
	onNode := sandbox.SandboxRef{ID: "sb-3", Token: "t3", Node: "node-c"}
	if err := tokens.PutSandboxToken(ctx, string(b.ID), onNode); err != nil {
		t.Fatal(err)
	}
	if got, err := tokens.SandboxToken(ctx, string(b.ID)); err != nil || got != onNode {
		t.Errorf("sandbox on an unregistered node: %+v, %v; want %+v", got, err, onNode)
	}
	for _, url := range []string{"http://10.0.0.3:7777", "http://10.0.0.33:7777"} {
		if _, err := st.HeartbeatNode(ctx, nodes.Node{ID: "node-c", URL: url, State: nodes.Active}); err != nil {
			t.Fatal(err)
		}
		want := onNode
		want.Addr = url
		if got, err := tokens.SandboxToken(ctx, string(b.ID)); err != nil || got != want {
			t.Errorf("sandbox on node-c at %s: %+v, %v; want %+v", url, got, err, want)
		}
	}
	if err := st.MarkBoxDeleted(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.SandboxToken(ctx, string(b.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	if err := conn.QueryRow(ctx, `SELECT sandbox_token_ciphertext FROM boxes WHERE id = $1`, string(b.ID)).Scan(&stored); err != nil || stored != nil {
		t.Errorf("deleted box's ciphertext = %x, %v; want NULL", stored, err)
	}
	if err := tokens.PutSandboxToken(ctx, string(b.ID), sandbox.SandboxRef{ID: "sb-4", Token: "t4"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("token for a deleted box: %v, want ErrConflict", err)
	}
	if err := tokens.PutSandboxToken(ctx, string(cocoonbox.NewBoxID()), sandbox.SandboxRef{ID: "sb-5", Token: "t5"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("token for an unknown box: %v, want ErrNotFound", err)
	}
	if _, err := tokens.SandboxToken(ctx, string(cocoonbox.NewBoxID())); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("token of an unknown box: %v, want ErrNotFound", err)
	}
	if err := tokens.PutSandboxToken(ctx, string(other.ID), sandbox.SandboxRef{ID: "sb-2", Token: ""}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty token: %v, want ErrInvalid", err)
	}
}

// TestStaleTransientBoxes: only live boxes in a state an operation passes through, unchanged
// since the cut-off, are listed for the reconciler, oldest first.
func TestStaleTransientBoxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	owner := newUser(t, st, "alice")
	states := []cocoonbox.BoxState{cocoonbox.BoxStateWaking, cocoonbox.BoxStateRunning, cocoonbox.BoxStateDeleting,
		cocoonbox.BoxStateHibernated, cocoonbox.BoxStateDeleted, cocoonbox.BoxStateFailed}
	ids := map[cocoonbox.BoxState]cocoonbox.BoxID{}
	for i, state := range states {
		b, err := st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: owner, Name: fmt.Sprintf("b%d", i), Size: cocoonbox.SizeSmall})
		if err != nil {
			t.Fatal(err)
		}
		if state != cocoonbox.BoxStateCreating {
			if err := st.SetBoxState(ctx, b.ID, state, "", ""); err != nil {
				t.Fatal(err)
			}
		}
		ids[state] = b.ID
	}
	if got, err := st.StaleTransientBoxes(ctx, time.Now().Add(-time.Hour), 10); err != nil || len(got) != 0 {
		t.Fatalf("before an hour ago: %v, %v; want none", got, err)
	}
	got, err := st.StaleTransientBoxes(ctx, time.Now().Add(time.Minute), 10)
	if err != nil || len(got) != 2 || got[0].ID != ids[cocoonbox.BoxStateWaking] || got[1].ID != ids[cocoonbox.BoxStateDeleting] {
		t.Fatalf("stale transient boxes: %+v, %v; want the waking then the deleting box", got, err)
	}
	if got, err := st.StaleTransientBoxes(ctx, time.Now().Add(time.Minute), 1); err != nil || len(got) != 1 {
		t.Fatalf("limit 1: %d rows, %v", len(got), err)
	}
}

// TestBoxLineage: a fork's row names its parent and when it was forked, read back by every
// query of boxes; a box created afresh names none.
func TestBoxLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	parent := newBox(t, st, alice, "dev")
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	fork, err := st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: alice, Name: "dev-fork-1", Size: cocoonbox.SizeSmall, Parent: parent.ID, ForkedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Parent != parent.ID || !fork.ForkedAt.Equal(at) || parent.Parent != "" || !parent.ForkedAt.IsZero() {
		t.Fatalf("fork %s at %v, parent %q at %v", fork.Parent, fork.ForkedAt, parent.Parent, parent.ForkedAt)
	}
	if got, err := st.BoxByID(ctx, fork.ID); err != nil || got.Parent != parent.ID || !got.ForkedAt.Equal(at) {
		t.Fatalf("BoxByID = %+v, %v", got, err)
	}
	list, err := st.ListBoxesForUser(ctx, alice)
	if err != nil || len(list) != 2 || list[0].Parent != parent.ID || list[1].Parent != "" {
		t.Fatalf("ListBoxesForUser = %+v, %v", list, err)
	}
}
