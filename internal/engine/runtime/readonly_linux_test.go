package runtime

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestGVisorImageFilesStayReadOnly: a file of the image bound read-only over the box's root (as
// the agent and its boot hook are, see imageReadOnly) cannot be replaced by the box's root, and
// the bind survives hibernate and wake. The base image has no agent, so the test binds one of its
// files the same way.
func TestGVisorImageFilesStayReadOnly(t *testing.T) {
	saved := imageReadOnly
	imageReadOnly = []string{"/usr/bin/env"}
	t.Cleanup(func() { imageReadOnly = saved })
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tamper := func() {
		t.Helper()
		out, stderr, code, err := e.exec(b.ID, "sh", "-c",
			"printf 'echo replaced' > /usr/bin/env; cp /bin/sh /usr/bin/env; rm -f /usr/bin/env; mv /bin/sh /usr/bin/env; /usr/bin/env echo original")
		if err != nil || code != 0 || strings.TrimSpace(out) != "original" {
			t.Fatalf("the box's root replaced an image file bound read-only: %q %q exit %d %v", out, stderr, code, err)
		}
	}
	tamper()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	tamper()
}
