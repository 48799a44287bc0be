package devstack_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/engine"
)

// TestCreateNamesTheMemoryLimit: when the engine's memory is committed, a create waits its
// create_wait for room and then fails no_capacity saying so, naming memory_overcommit, and the box
// that fit keeps running. The overcommit is set so that this host's boxes may hold 768 MiB: one
// small box.
func TestCreateNamesTheMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	mem, err := engine.HostMemory()
	if err != nil {
		t.Fatal(err)
	}
	cfg := boxConfig(t)
	cfg.EngineMemoryOvercommit = float64(768<<20) / float64(mem-1<<30)
	cfg.CreateWait = 3 * time.Second
	d, ctx, owner, _ := newBoxEnv(t, cfg, 3*time.Minute)
	first := cocoonbox.NewBoxID()
	if st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: first, Name: "fits", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("the first small box: %+v, %v", st, err)
	}
	_, err = d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: cocoonbox.NewBoxID(), Name: "too-many", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.ENoCapacity || !strings.Contains(err.Error(), "memory_overcommit") || !strings.Contains(err.Error(), "needs 512 MiB") {
		t.Fatalf("a second small box: %v (%s); want no_capacity naming memory_overcommit", err, cocoonbox.ErrorCode(err))
	}
	if st, err := d.Boxes.Get(ctx, owner.ID, first); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Errorf("the box that fit: %+v, %v", st.State, err)
	}
}
