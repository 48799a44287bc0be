package cocoonbox

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// BoxID identifies a box: "bx_" followed by 16 lowercase hex digits.
type BoxID string

// NewBoxID returns a random box ID.
func NewBoxID() BoxID {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return BoxID("bx_" + hex.EncodeToString(b[:]))
}

// Validate reports whether id has the box ID form.
func (id BoxID) Validate() error {
	s := string(id)
	if s == "" {
		return Invalid("box_id", "is required")
	}
	if !strings.HasPrefix(s, "bx_") || len(s) != 3+16 || !isLowerHex(s[3:]) {
		return Invalid("box_id", "must be bx_ followed by 16 lowercase hex digits, got "+quote(s))
	}
	return nil
}

// BoxState is where a box is in its lifecycle (see docs/workflows.md).
type BoxState string

// Box states. Transient states end in -ing; failed carries a reason and can be retried.
const (
	BoxStateCreating     BoxState = "creating"
	BoxStateRunning      BoxState = "running"
	BoxStateHibernating  BoxState = "hibernating"
	BoxStateHibernated   BoxState = "hibernated"
	BoxStateWaking       BoxState = "waking"
	BoxStateSnapshotting BoxState = "snapshotting"
	BoxStateRestoring    BoxState = "restoring"
	BoxStateDeleting     BoxState = "deleting"
	BoxStateDeleted      BoxState = "deleted"
	BoxStateFailed       BoxState = "failed"
)

// BoxStates lists every state, in lifecycle order.
var BoxStates = []BoxState{
	BoxStateCreating, BoxStateRunning, BoxStateHibernating, BoxStateHibernated, BoxStateWaking,
	BoxStateSnapshotting, BoxStateRestoring, BoxStateDeleting, BoxStateDeleted, BoxStateFailed,
}

// Validate reports whether s is a known state.
func (s BoxState) Validate() error {
	if !slices.Contains(BoxStates, s) {
		return Invalid("state", "unknown box state "+quote(string(s)))
	}
	return nil
}

// Transient reports whether s is a state the box passes through while an operation runs.
func (s BoxState) Transient() bool {
	switch s {
	case BoxStateCreating, BoxStateHibernating, BoxStateWaking, BoxStateSnapshotting,
		BoxStateRestoring, BoxStateDeleting:
		return true
	}
	return false
}

// Size is a box's resource tier; the names and figures are the sandbox engine's.
type Size string

// Sizes, as the sandbox engine defines them.
const (
	SizeSmall   Size = "small"
	SizeMedium  Size = "medium"
	SizeLarge   Size = "large"
	SizeXLarge  Size = "xlarge"
	Size2XLarge Size = "2xlarge"
)

// DefaultSize is the size of a box created without one.
const DefaultSize = SizeMedium

// SizeSpec is what a size grants. The disk is a quota on what the box writes on top of its
// image, held by a filesystem of that size; the host stores only what the box writes.
type SizeSpec struct {
	VCPUs    int
	MemoryMB int
	DiskMB   int
}

var sizeSpecs = map[Size]SizeSpec{
	SizeSmall:   {1, 512, 10 << 10},
	SizeMedium:  {2, 1024, 20 << 10},
	SizeLarge:   {4, 4096, 40 << 10},
	SizeXLarge:  {4, 8192, 80 << 10},
	Size2XLarge: {8, 16384, 160 << 10},
}

// Sizes lists every size, smallest first.
var Sizes = []Size{SizeSmall, SizeMedium, SizeLarge, SizeXLarge, Size2XLarge}

// Validate reports whether s is a known size.
func (s Size) Validate() error {
	if _, ok := sizeSpecs[s]; !ok {
		return Invalid("size", "unknown size "+quote(string(s))+", want one of "+joinSizes())
	}
	return nil
}

// Spec returns what s grants; the zero SizeSpec for an unknown size.
func (s Size) Spec() SizeSpec { return sizeSpecs[s] }

func joinSizes() string {
	parts := make([]string, len(Sizes))
	for i, s := range Sizes {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// MaxBoxNameLen bounds a box's display name.
const MaxBoxNameLen = 63

// Box is a user's persistent cloud computer.
type Box struct {
	ID        BoxID
	Owner     string // user ID
	Name      string
	Size      Size
	State     BoxState
	Reason    string // why the box failed, when State is failed
	CreatedAt time.Time
	UpdatedAt time.Time
	// Parent is the box this one was forked from, at ForkedAt; empty for a box created afresh.
	Parent   BoxID
	ForkedAt time.Time
}

// ValidateBoxName reports whether name is a usable box name: 1–63 characters of letters, digits,
// '-', '_' and '.', starting with a letter or digit.
func ValidateBoxName(name string) error {
	if name == "" {
		return Invalid("name", "is required")
	}
	if utf8.RuneCountInString(name) > MaxBoxNameLen {
		return Invalid("name", "is longer than 63 characters")
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			i > 0 && (r == '-' || r == '_' || r == '.')
		if !ok {
			return Invalid("name", "may hold only letters, digits, '-', '_' and '.', and must start with a letter or digit, got "+quote(name))
		}
	}
	return nil
}

// Validate checks the fields a client supplies when creating a box.
func (b *Box) Validate() error {
	if err := b.ID.Validate(); err != nil {
		return err
	}
	if err := ValidateBoxName(b.Name); err != nil {
		return err
	}
	return b.Size.Validate()
}

func isLowerHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return "\"" + s + "\""
}
