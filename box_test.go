package cocoonbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
)

func TestBoxIDValidate(t *testing.T) {
	if err := cocoonbox.NewBoxID().Validate(); err != nil {
		t.Fatalf("NewBoxID().Validate() = %v", err)
	}
	if a, b := cocoonbox.NewBoxID(), cocoonbox.NewBoxID(); a == b {
		t.Fatalf("two NewBoxID calls returned %s twice", a)
	}
	for _, bad := range []string{"", "bx_", "bx_0123456789abcde", "bx_0123456789ABCDEF", "sb_0123456789abcdef", "bx_0123456789abcdef0"} {
		err := cocoonbox.BoxID(bad).Validate()
		if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !strings.Contains(err.Error(), "box_id") {
			t.Errorf("BoxID(%q).Validate() = %v, want an invalid error naming box_id", bad, err)
		}
	}
}

func TestSizeValidate(t *testing.T) {
	for _, s := range cocoonbox.Sizes {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
		if s.Spec().VCPUs == 0 || s.Spec().MemoryMB == 0 {
			t.Errorf("%s has no spec", s)
		}
	}
	err := cocoonbox.Size("huge").Validate()
	if err == nil || !strings.Contains(err.Error(), `size: unknown size "huge"`) || !strings.Contains(err.Error(), "small") {
		t.Fatalf("unknown size error = %v, want it to name the field and list the sizes", err)
	}
	if got := cocoonbox.SizeSmall.Spec(); got.VCPUs != 1 || got.MemoryMB != 512 {
		t.Fatalf("small = %+v, want the engine's 1 vCPU / 512 MiB", got)
	}
}

func TestValidateBoxName(t *testing.T) {
	for _, ok := range []string{"a", "dev-box", "Box_1.2", strings.Repeat("x", 63)} {
		if err := cocoonbox.ValidateBoxName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "has space", "semi;colon", strings.Repeat("x", 64), "ünï"} {
		if err := cocoonbox.ValidateBoxName(bad); cocoonbox.ErrorCode(err) != cocoonbox.EInvalid {
			t.Errorf("%q: got %v, want invalid", bad, err)
		}
	}
}

func TestBoxValidate(t *testing.T) {
	b := cocoonbox.Box{ID: cocoonbox.NewBoxID(), Name: "dev", Size: cocoonbox.DefaultSize}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	b.Size = "tiny"
	if err := b.Validate(); err == nil || !strings.HasPrefix(cocoonbox.ErrorMessage(err), "size:") {
		t.Fatalf("got %v, want a size error", err)
	}
}

func TestBoxStates(t *testing.T) {
	for _, s := range cocoonbox.BoxStates {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	if cocoonbox.BoxState("sleeping").Validate() == nil {
		t.Fatal("unknown state accepted")
	}
	if !cocoonbox.BoxStateWaking.Transient() || cocoonbox.BoxStateRunning.Transient() || cocoonbox.BoxStateFailed.Transient() {
		t.Fatal("transient classification is wrong")
	}
}

func TestRoles(t *testing.T) {
	cases := []struct {
		have, want cocoonbox.Role
		ok         bool
	}{
		{cocoonbox.RoleViewer, cocoonbox.RoleViewer, true},
		{cocoonbox.RoleViewer, cocoonbox.RoleDriver, false},
		{cocoonbox.RoleDriver, cocoonbox.RoleViewer, true},
		{cocoonbox.RoleAdmin, cocoonbox.RoleDriver, true},
		{cocoonbox.RoleAdmin, cocoonbox.RoleOwner, false},
		{cocoonbox.RoleOwner, cocoonbox.RoleAdmin, true},
		{"root", cocoonbox.RoleViewer, false},
	}
	for _, c := range cases {
		if got := c.have.Allows(c.want); got != c.ok {
			t.Errorf("%s.Allows(%s) = %v, want %v", c.have, c.want, got, c.ok)
		}
	}
	if cocoonbox.RoleOwner.Validate() == nil {
		t.Error("owner must not be grantable through a share")
	}
	if cocoonbox.RoleDriver.Validate() != nil {
		t.Error("driver must be grantable")
	}
}

func TestErrorCodeAndMessage(t *testing.T) {
	if cocoonbox.ErrorCode(nil) != "" || cocoonbox.ErrorMessage(nil) != "" {
		t.Fatal("nil error has a code")
	}
	plain := errors.New("pq: connection refused at 10.0.0.3")
	if cocoonbox.ErrorCode(plain) != cocoonbox.EInternal || cocoonbox.ErrorMessage(plain) != "internal error" {
		t.Fatal("a plain error must read as internal error to callers")
	}
	wrapped := fmt.Errorf("create box: %w", cocoonbox.Errorf(cocoonbox.EConflict, "box %s exists", "bx_1"))
	if cocoonbox.ErrorCode(wrapped) != cocoonbox.EConflict || cocoonbox.ErrorMessage(wrapped) != "box bx_1 exists" {
		t.Fatalf("wrapped: code %q message %q", cocoonbox.ErrorCode(wrapped), cocoonbox.ErrorMessage(wrapped))
	}
	internal := &cocoonbox.Error{Code: cocoonbox.EInternal, Message: "secret detail", Err: plain}
	if cocoonbox.ErrorMessage(internal) != "internal error" || !errors.Is(internal, plain) {
		t.Fatal("internal error details leak or the cause is lost")
	}
}
