package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestWarmPoolOnStart: the dev stack fills the warm pool its config names as it starts; a create
// takes a warm box and says so, each warm box is its own machine (machine-id), and a create the
// pool does not cover boots cold and says that.
func TestWarmPoolOnStart(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop" // its boot gives each box a machine-id of its own
	cfg.Pools = []config.Pool{{Size: string(cocoonbox.SizeSmall), Warm: 2}}
	d, ctx, owner, eng := newBoxEnv(t, cfg, 5*time.Minute)

	if err := testutil.Poll(ctx, 3*time.Minute, func() error {
		pools, err := d.Boxes.Pools(ctx)
		if err != nil {
			return err
		}
		if len(pools) != 1 || pools[0].Template != "desktop" || pools[0].Net != sandbox.NetNone || pools[0].Size != sandbox.SizeSmall ||
			pools[0].Target != 2 || pools[0].Ready != 2 {
			return fmt.Errorf("pools %+v; want desktop/small/none with 2 ready", pools)
		}
		return nil
	}); err != nil {
		t.Fatalf("the warm pool on a fresh data dir: %v", err)
	}

	ids := map[string]string{} // machine-id → box
	for _, name := range []string{"warm-a", "warm-b"} {
		st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: name, Size: cocoonbox.SizeSmall})
		if err != nil || st.State != cocoonbox.BoxStateRunning || st.Start != sandbox.StartWarm {
			t.Fatalf("create %s: %+v, %v; want running from the warm pool", name, st, err)
		}
		mid := strings.TrimSpace(mustExec(ctx, t, eng, sandboxRef(ctx, t, eng, st.SandboxID), "cat /etc/machine-id"))
		if len(mid) != 32 {
			t.Fatalf("box %s has machine-id %q", name, mid)
		}
		if other, ok := ids[mid]; ok {
			t.Fatalf("boxes %s and %s share machine-id %s", other, name, mid)
		}
		ids[mid] = name
	}
	st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "cold", Size: cocoonbox.SizeMedium})
	if err != nil || st.Start != sandbox.StartCold {
		t.Fatalf("create of a size no pool holds: %+v, %v; want a cold start", st, err)
	}
}

// TestCreateSaysWhatItWaitsFor: with the template's image not built, a create says what it
// waits for while it tries again, gives up after the configured wait with that reason, and
// leaves no sandbox behind.
func TestCreateSaysWhatItWaitsFor(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.ImageCache = t.TempDir() // no image built here
	cfg.CreateWait = 40 * time.Second
	d, ctx, owner, eng := newBoxEnv(t, cfg, 4*time.Minute)

	id := cocoonbox.NewBoxID()
	seen := make(chan string, 1)
	go func() {
		for ctx.Err() == nil {
			if v, err := d.Boxes.Get(ctx, owner.ID, id); err == nil && v.Waiting != "" {
				seen <- v.Waiting
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	began := time.Now()
	_, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "unbuilt", Size: cocoonbox.SizeSmall})
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "image is not built") {
		t.Fatalf("create with no image: %v; want it to fail saying the image is not built", err)
	}
	select {
	case w := <-seen:
		if !strings.Contains(w, "image is not built") {
			t.Fatalf("the create waited for %q", w)
		}
	default:
		t.Fatal("the create never said what it waited for")
	}
	if took > cfg.CreateWait+30*time.Second {
		t.Fatalf("the create gave up after %v, with a wait of %v", took, cfg.CreateWait)
	}
	v, err := d.Boxes.Get(ctx, owner.ID, id)
	if err != nil || v.State != cocoonbox.BoxStateFailed || !strings.Contains(v.LastError, "image is not built") || v.SandboxID != "" {
		t.Fatalf("after giving up: %+v, %v; want failed with the reason and no sandbox", v, err)
	}
	if rows, err := eng.List(ctx, ""); err != nil || len(rows) != 0 {
		t.Fatalf("sandboxes left: %+v, %v", rows, err)
	}
}
