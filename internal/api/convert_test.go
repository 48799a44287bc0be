package api

import (
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

func TestBoxProto(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	v := boxsvc.View{
		Status: workflows.Status{
			BoxID: "bx_0123456789abcdef", State: cocoonbox.BoxStateRunning, SandboxID: "sb_1", Viewers: 2,
			Pins: []string{"run_1"}, LastError: "boom", LastSnapshot: "sn_0123456789abcdef",
		},
		Name: "dev", Owner: "usr_1", Size: cocoonbox.SizeSmall, CreatedAt: created, Role: cocoonbox.RoleDriver,
	}
	b := boxProto(v)
	if b.GetId() != "bx_0123456789abcdef" || b.GetName() != "dev" || b.GetOwner() != "usr_1" || b.GetSize() != "small" ||
		b.GetState() != "running" || b.GetLastError() != "boom" || b.GetRole() != "driver" || b.GetViewers() != 2 ||
		len(b.GetPins()) != 1 || b.GetLastSnapshot() != "sn_0123456789abcdef" || !b.GetCreatedAt().AsTime().Equal(created) {
		t.Fatalf("boxProto = %v", b)
	}
	if b.IdleDeadline != nil {
		t.Fatalf("a zero idle deadline is set on the wire: %v", b.IdleDeadline)
	}
	v.IdleDeadline = created.Add(time.Hour)
	v.CreatedAt = time.Time{}
	b = boxProto(v)
	if !b.GetIdleDeadline().AsTime().Equal(created.Add(time.Hour)) || b.CreatedAt != nil {
		t.Fatalf("boxProto times = %v, %v", b.IdleDeadline, b.CreatedAt)
	}
}

func TestTokenAndShareProto(t *testing.T) {
	now := time.Now().UTC()
	tk := tokenProto(store.Token{ID: "tok_1", Name: "ci", CreatedAt: now})
	if tk.LastUsedAt != nil || tk.ExpiresAt != nil || tk.RevokedAt != nil || !tk.GetCreatedAt().AsTime().Equal(now) {
		t.Fatalf("tokenProto = %v", tk)
	}
	tk = tokenProto(store.Token{ExpiresAt: &now, RevokedAt: &now, LastUsedAt: &now})
	if tk.ExpiresAt == nil || tk.RevokedAt == nil || tk.LastUsedAt == nil {
		t.Fatalf("tokenProto dropped a time: %v", tk)
	}
	sh := shareProto(store.Share{BoxID: "bx_0123456789abcdef", UserID: "usr_2", UserName: "bob", Role: cocoonbox.RoleViewer, CreatedAt: now})
	if sh.GetBoxId() != "bx_0123456789abcdef" || sh.GetUserName() != "bob" || sh.GetRole() != "viewer" || sh.ExpiresAt != nil {
		t.Fatalf("shareProto = %v", sh)
	}
	snap := snapshotProto(cocoonbox.Snapshot{ID: "sn_1", BoxID: "bx_0123456789abcdef", State: cocoonbox.SnapshotComplete, Bytes: 10, Files: 3, Pinned: true})
	if snap.GetState() != "complete" || snap.GetBytes() != 10 || !snap.GetPinned() || snap.CreatedAt != nil {
		t.Fatalf("snapshotProto = %v", snap)
	}
}
