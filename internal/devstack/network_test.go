package devstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/netlab"
)

// TestBoxNetworkThroughTheWorkflow: boxes created with a network policy through the box service
// get it from their workflow's claim: an internet box fetches from the lab's internet by name,
// and again at once with the same address after a hibernate and wake through its workflow; an
// allow-list box reaches what it lists and nothing else; and box show says the policy. The dev
// stack's engine routes boxes through the lab only (its uplink is the lab router's).
func TestBoxNetworkThroughTheWorkflow(t *testing.T) {
	lab := netlab.New(t)
	cfg := boxConfig(t)
	cfg.EngineNetwork = config.Network{Uplink: lab.Uplink, UplinkNetns: lab.Router, Pool: "10.78.0.0/24", DNS: netlab.Web}
	d, ctx, owner, _ := newBoxEnv(t, cfg, 4*time.Minute)

	web := createNetBox(t, d, owner.ID, "web", cocoonbox.Network{Policy: cocoonbox.NetworkInternet})
	addr := mustFetch(t, d, owner.ID, web, netlab.Name, netlab.WebPort)
	if v, err := d.Boxes.Hibernate(ctx, owner.ID, web); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %v %v", v.State, err)
	}
	if v, err := d.Boxes.Wake(ctx, owner.ID, web); err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("wake: %v %v", v.State, err)
	}
	if got := mustFetch(t, d, owner.ID, web, netlab.Web, netlab.WebPort); got != addr {
		t.Fatalf("after wake the box's address is %s, was %s", got, addr)
	}
	if out := fetch(t, d, owner.ID, web, netlab.Metadata, 80); !strings.Contains(out, "timed out") {
		t.Errorf("an internet box reached the metadata address: %s", out)
	}

	allow := cocoonbox.Network{Policy: cocoonbox.NetworkAllow, Allow: []string{fmt.Sprintf("%s:%d", netlab.Web, netlab.WebPort)}}
	db := createNetBox(t, d, owner.ID, "db", allow)
	mustFetch(t, d, owner.ID, db, netlab.Web, netlab.WebPort)
	if out := fetch(t, d, owner.ID, db, netlab.Web, netlab.OtherPort); !strings.Contains(out, "timed out") {
		t.Errorf("an allow-list box reached a port it does not list: %s", out)
	}
	v, err := d.Boxes.Get(ctx, owner.ID, db)
	if err != nil || v.Policy.Network.Policy != cocoonbox.NetworkAllow || len(v.Policy.Network.Allow) != 1 {
		t.Fatalf("box show of the allow-list box: %+v %v", v.Policy.Network, err)
	}

	// The allow-list changes at once, through the workflow, to the other port only.
	other := cocoonbox.Network{Policy: cocoonbox.NetworkAllow, Allow: []string{fmt.Sprintf("%s:%d", netlab.Web, netlab.OtherPort)}}
	if v, err := d.Boxes.SetNetwork(ctx, owner.ID, db, other); err != nil || v.Policy.Network.Allow[0] != other.Allow[0] {
		t.Fatalf("set network: %+v %v", v.Policy.Network, err)
	}
	mustFetch(t, d, owner.ID, db, netlab.Web, netlab.OtherPort)
	if out := fetch(t, d, owner.ID, db, netlab.Web, netlab.WebPort); !strings.Contains(out, "timed out") {
		t.Errorf("after the change the box still reaches the port it no longer lists: %s", out)
	}
	// It survives a hibernate and wake (the engine keeps the policy with the box).
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, db); err != nil {
		t.Fatal(err)
	}
	mustFetch(t, d, owner.ID, db, netlab.Web, netlab.OtherPort)
	// A box cannot lose its NIC by a policy change.
	if _, err := d.Boxes.SetNetwork(ctx, owner.ID, db, cocoonbox.Network{Policy: cocoonbox.NetworkNone}); cocoonbox.ErrorCode(err) != cocoonbox.EConflict {
		t.Errorf("set network none: %v, want conflict", err)
	}

	// A bad policy is refused naming its field, and no box is made.
	_, err = d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "bad", Size: cocoonbox.SizeSmall,
		Network: cocoonbox.Network{Policy: cocoonbox.NetworkAllow, Allow: []string{"10.0.0.0/33"}}})
	if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || cocoonbox.ErrorField(err) != "network_allow" {
		t.Fatalf("create with a bad allow-list: %v", err)
	}
	if _, err := d.Store.BoxByOwnerName(ctx, owner.ID, "bad"); err == nil {
		t.Error("the refused create left a box row")
	}
}

func createNetBox(t *testing.T, d *devstack.Dev, owner, name string, n cocoonbox.Network) cocoonbox.BoxID {
	t.Helper()
	ctx := t.Context()
	v, err := d.Boxes.Create(ctx, owner, boxsvc.CreateRequest{Name: name, Size: cocoonbox.SizeSmall, Network: n})
	if err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create %s: %v %v", name, v.State, err)
	}
	// Deleted before the stack stops: a stopping stack hibernates its boxes, and a hibernated
	// box keeps its network namespace for its next wake.
	t.Cleanup(func() {
		if _, err := d.Boxes.Delete(context.Background(), owner, v.BoxID); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	return v.BoxID
}

// fetch runs netlab.FetchScript in the box through the box service's exec.
func fetch(t *testing.T, d *devstack.Dev, owner string, id cocoonbox.BoxID, host string, port int) string {
	t.Helper()
	res, err := d.Boxes.Exec(t.Context(), owner, id, boxsvc.ExecRequest{
		Argv: []string{"python3", "-c", netlab.FetchScript, host, fmt.Sprint(port)}, TimeoutSeconds: 30})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("fetch %s:%d: %+v %v", host, port, res, err)
	}
	return strings.TrimSpace(res.Stdout)
}

// mustFetch fetches and returns the box's address, failing unless the server answered.
func mustFetch(t *testing.T, d *devstack.Dev, owner string, id cocoonbox.BoxID, host string, port int) string {
	t.Helper()
	out := fetch(t, d, owner, id, host, port)
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "OK" || !strings.Contains(out, "hello from") {
		t.Fatalf("fetch %s:%d: %s", host, port, out)
	}
	if _, err := netip.ParseAddr(f[1]); err != nil {
		t.Fatalf("fetch %s:%d: no address in %q", host, port, out)
	}
	return f[1]
}
