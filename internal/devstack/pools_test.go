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
		if len(pools) != 1 || pools[0].Key != (sandbox.PoolKey{Template: "desktop", Net: sandbox.NetNone, Size: sandbox.SizeSmall}) ||
			pools[0].Target != 2 || pools[0].Warm != 2 {
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
