package boxsvc_test

import (
	"context"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// TestShareHidesUnknownUsers checks that Share and Unshare answer the same for a user name
// that does not exist as for one that does, so they cannot be used to learn which names exist;
// only the known user is granted anything.
func TestShareHidesUnknownUsers(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	ctx := context.Background()
	if _, err := e.st.CreateUser(ctx, store.NewUser{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	known, err := e.svc.Share(ctx, e.ann, e.box, "bob", cocoonbox.RoleDriver, nil)
	if err != nil {
		t.Fatalf("share with bob: %v", err)
	}
	unknown, err := e.svc.Share(ctx, e.ann, e.box, "nobody", cocoonbox.RoleDriver, nil)
	if err != nil {
		t.Fatalf("share with an unknown user: %v; want the answer a known user gets", err)
	}
	if known.UserName != "bob" || unknown.UserName != "nobody" || known.UserID != "" || unknown.UserID != "" ||
		known.BoxID != unknown.BoxID || known.Role != unknown.Role || known.ExpiresAt != nil || unknown.ExpiresAt != nil {
		t.Fatalf("answers differ in more than the name: %+v and %+v", known, unknown)
	}
	shares, err := e.svc.ListShares(ctx, e.ann, e.box)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sh := range shares {
		names = append(names, sh.UserName)
	}
	if len(names) != 2 || names[0] != "vic" || names[1] != "bob" {
		t.Fatalf("shares after both: %v; want vic and bob only", names)
	}

	if err := e.svc.Unshare(ctx, e.ann, e.box, "bob"); err != nil {
		t.Fatal(err)
	}
	again := e.svc.Unshare(ctx, e.ann, e.box, "bob")
	none := e.svc.Unshare(ctx, e.ann, e.box, "nobody")
	if cocoonbox.ErrorCode(again) != cocoonbox.ENotFound || cocoonbox.ErrorCode(none) != cocoonbox.ENotFound ||
		cocoonbox.ErrorMessage(again) != "user: bob has no share of box "+string(e.box) ||
		cocoonbox.ErrorMessage(none) != "user: nobody has no share of box "+string(e.box) {
		t.Fatalf("unshare without a share: %v; of an unknown user: %v; want the same answer", again, none)
	}
}
