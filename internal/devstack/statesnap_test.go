package devstack_test

import (
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// writeHomes fills the trees an agent snapshot holds: a user's files in /home/user (owned by the
// user, a symlink, an executable, a file of 8 MiB) and root's in /root.
const writeHomes = `set -e
mkdir -p /home/user/work/sub /root/notes
head -c 8M /dev/urandom > /home/user/work/data.bin
printf 'hello\n' > /home/user/work/sub/hello.txt
printf '#!/bin/sh\necho run\n' > /home/user/work/run.sh && chmod 755 /home/user/work/run.sh
ln -s sub/hello.txt /home/user/work/link
chown -R user:user /home/user/work
printf secret > /root/notes/private && chmod 600 /root/notes/private
touch -h -d '2001-02-03 04:05:06' /home/user/work/sub/hello.txt /home/user/work/link`

// describeHomes prints what writeHomes made: paths, types, modes, owners, sizes, link targets,
// the mtimes set explicitly, and every file's sha256.
const describeHomes = `cd / && find home/user/work root/notes -printf '%p %y %m %U:%G %s %l\n' | sort &&
find home/user/work ! -newermt 2002-01-01 -printf '%p %T@\n' | sort &&
find home/user/work root/notes -type f -exec sha256sum {} + | sort`

// TestStateSnapshots: against an engine without disk export (upstream sandboxd; here the local
// engine with it switched off), a durable hibernate seals the box through its agent (its State
// service) into a full snapshot of the homes, verified like any other, and the sandbox the seal
// woke sleeps again; the sandbox lost behind the workflow's back, the wake rebuilds the box on a
// new sandbox with the homes' files, modes, owners and links as they were (the homes being
// directories of the image, the agent replaces their contents), and says so; the next
// hibernate seals before the box sleeps.
func TestStateSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop" // the image with the resident agent
	cfg.EngineNoDiskExport = true
	d, ctx, owner, eng := newBoxEnv(t, cfg, 6*time.Minute)
	if info, err := eng.Info(ctx); err != nil || info.Capabilities.DiskExport {
		t.Fatalf("engine info %+v, %v; want no disk export", info.Capabilities, err)
	}
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, writeHomes)
	before := mustExec(ctx, t, eng, ref, describeHomes)

	// The first durable hibernate seals after the box sleeps; reaching the agent wakes the
	// sandbox, which is put back to sleep.
	if st, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", st.Status, err)
	}
	sealed := waitSealed(ctx, t, d, owner.ID, id)
	snap, err := d.Store.SnapshotByID(ctx, sealed.LastSnapshot)
	if err != nil || snap.Kind != cocoonbox.SnapshotKindState || snap.BaseID != "" || snap.IndexKey != "" || snap.Bytes < 8<<20 {
		t.Fatalf("the seal: %+v, %v; want a full state snapshot of at least 8 MiB", snap, err)
	}
	checkStored(ctx, t, d, snap)
	if row, err := eng.Get(ctx, ref.ID); err != nil || !row.Hibernated {
		t.Fatalf("the sealed sandbox: %+v, %v; want it asleep again", row, err)
	}

	// The node loses the box while it sleeps; the wake rebuilds it from the seal.
	if err := eng.Release(ctx, sandbox.SandboxRef{ID: ref.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := d.Boxes.Wake(ctx, owner.ID, id)
	if err != nil || v.State != cocoonbox.BoxStateRunning || v.SandboxID == ref.ID || v.RestoredFrom.SnapshotID != snap.ID {
		t.Fatalf("wake after losing the sandbox: %+v, %v; want running on a new sandbox restored from %s", v.Status, err, snap.ID)
	}
	ref2 := sandboxRef(ctx, t, eng, v.SandboxID)
	if after := mustExec(ctx, t, eng, ref2, describeHomes); after != before {
		t.Fatalf("the restored homes differ:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Now that the box is known to seal through its agent, a hibernate seals first, while the
	// agent is up, and the box goes to sleep sealed by a new full snapshot.
	mustExec(ctx, t, eng, ref2, "echo more > /root/notes/more")
	st, err := d.Boxes.Hibernate(ctx, owner.ID, id)
	if err != nil || st.State != cocoonbox.BoxStateHibernated || st.LastSnapshot == snap.ID || st.Seal == workflows.SealSealing {
		t.Fatalf("second hibernate: %+v, %v; want asleep with a new snapshot taken before", st.Status, err)
	}
	if s, err := d.Store.SnapshotByID(ctx, st.LastSnapshot); err != nil || s.BaseID != "" || s.Kind != cocoonbox.SnapshotKindState {
		t.Fatalf("the second seal: %+v, %v; want a full state snapshot", s, err)
	}
	if row, err := eng.Get(ctx, ref2.ID); err != nil || !row.Hibernated {
		t.Fatalf("the sandbox after the second hibernate: %+v, %v; want it asleep", row, err)
	}
}
