package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBundleBindsTheImagesAgentReadOnly: a box runs the agent and boot hook of its image, bound
// read-only over its root, so its root cannot swap them on the writable disk; an image without
// them gets no such mounts.
func TestBundleBindsTheImagesAgentReadOnly(t *testing.T) {
	spec := func(t *testing.T, files ...string) (Spec, ociSpec) {
		rootfs := t.TempDir()
		for _, f := range files {
			p := filepath.Join(rootfs, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		s := Spec{ID: "sb_1", Dir: t.TempDir(), Rootfs: rootfs, VCPUs: 1, MemoryMB: 512}
		if err := writeBundle(s); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(s.Dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var oci ociSpec
		if err := json.Unmarshal(data, &oci); err != nil {
			t.Fatal(err)
		}
		return s, oci
	}
	s, oci := spec(t, "usr/local/bin/cocoonbox-agent", "etc/cocoonbox/boot")
	for _, p := range imageReadOnly {
		i := slices.IndexFunc(oci.Mounts, func(m ociMount) bool { return m.Destination == p })
		if i < 0 {
			t.Fatalf("no mount over %s in %+v", p, oci.Mounts)
		}
		m := oci.Mounts[i]
		if m.Type != "bind" || m.Source != filepath.Join(s.Rootfs, p) || !slices.Contains(m.Options, "ro") {
			t.Errorf("mount over %s: %+v, want a read-only bind of the image's file", p, m)
		}
	}
	_, oci = spec(t)
	for _, m := range oci.Mounts {
		if m.Type == "bind" {
			t.Errorf("an image without an agent got the mount %+v", m)
		}
	}
}
