package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// The few OCI runtime-spec fields a box needs, written by hand rather than importing the spec
// module for a dozen structs.
type ociSpec struct {
	Version  string     `json:"ociVersion"`
	Process  ociProcess `json:"process"`
	Root     ociRoot    `json:"root"`
	Hostname string     `json:"hostname"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
}

type ociProcess struct {
	User         ociUser             `json:"user"`
	Args         []string            `json:"args"`
	Env          []string            `json:"env"`
	Cwd          string              `json:"cwd"`
	Capabilities map[string][]string `json:"capabilities"`
	Rlimits      []ociRlimit         `json:"rlimits"`
}

type ociUser struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	CgroupsPath string         `json:"cgroupsPath"`
	Resources   ociResources   `json:"resources"`
	Namespaces  []ociNamespace `json:"namespaces"`
}

type ociResources struct {
	Memory struct {
		Limit int64 `json:"limit"`
	} `json:"memory"`
	CPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	} `json:"cpu"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"` // join this namespace rather than make a new one
}

// boxCaps are Docker's default capabilities: root in a box can install packages and run
// services, while gVisor keeps all of it away from the host kernel.
var boxCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// cpuPeriod is the CFS period the vCPU quota is expressed in.
const cpuPeriod = 100_000

// boxEnv is the environment of a box's init and so of every command it runs.
func boxEnv(spec Spec) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "TERM=xterm",
	}
	return append(env, spec.Env...)
}

// cgroupPath is where a box's cgroup lives, relative to each hierarchy's root.
func cgroupPath(id string) string { return "/cocoonbox/" + id }

// imageReadOnly are the image's files that decide which agent a box runs: they are bound
// read-only over the box's root, from the shared image, so the box's root cannot replace the
// agent on its writable disk (a replaced copy there would also outlive a snapshot and restore).
var imageReadOnly = []string{"/usr/local/bin/cocoonbox-agent", "/etc/cocoonbox/boot"}

// readOnlyMounts are the read-only binds of the imageReadOnly files the image has.
func readOnlyMounts(rootfs string) []ociMount {
	var ms []ociMount
	for _, p := range imageReadOnly {
		src := filepath.Join(rootfs, p)
		if fi, err := os.Lstat(src); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		ms = append(ms, ociMount{Destination: p, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	return ms
}

// writeBundle writes the box's OCI spec: the init as PID 1 on the overlay root, loopback only
// (runsc --network=none) or, for a box with a NIC, the namespace the engine made for it and its
// resolv.conf; limits from the size tier.
func writeBundle(spec Spec) error {
	s := ociSpec{
		Version:  "1.0.2",
		Root:     ociRoot{Path: rootfsDir},
		Hostname: "box",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
	}
	s.Mounts = append(s.Mounts, readOnlyMounts(spec.Rootfs)...)
	s.Process.Args = []string{boxproto.InitPath}
	s.Process.Env = boxEnv(spec)
	s.Process.Cwd = "/"
	// The init alone also holds CAP_SYS_ADMIN, to set the hostname of a forked box; it takes it
	// out of the bounding set before it starts anything (cocoonbox-init).
	initCaps := append(slices.Clone(boxCaps), "CAP_SYS_ADMIN")
	s.Process.Capabilities = map[string][]string{
		"bounding": initCaps, "effective": initCaps, "permitted": initCaps,
	}
	s.Process.Rlimits = []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}}
	s.Linux.CgroupsPath = cgroupPath(spec.ID)
	s.Linux.Resources.Memory.Limit = int64(spec.MemoryMB) << 20
	s.Linux.Resources.CPU.Period = cpuPeriod
	s.Linux.Resources.CPU.Quota = int64(spec.VCPUs) * cpuPeriod
	for _, ns := range []string{"pid", "network", "ipc", "uts", "mount"} {
		n := ociNamespace{Type: ns}
		if ns == "network" && spec.Net != nil {
			// The namespace the engine made, with the box's veth end: runsc's netstack takes it.
			n.Path = netnsPath(boxNetns(spec.ID))
		}
		s.Linux.Namespaces = append(s.Linux.Namespaces, n)
	}
	if spec.Net != nil {
		s.Mounts = append(s.Mounts, ociMount{Destination: "/etc/resolv.conf", Type: "bind",
			Source: filepath.Join(spec.Dir, resolvConfFile), Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode bundle: %w", err)
	}
	return writeFileAtomic(filepath.Join(spec.Dir, "config.json"), b)
}
