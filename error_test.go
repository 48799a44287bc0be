package cocoonbox_test

import (
	"fmt"
	"testing"

	"github.com/loomhand/cocoonbox"
)

// TestErrorField: an invalid-argument error names its field apart from its reason, so a
// transport can rename the field to the one its client sent without cutting strings.
func TestErrorField(t *testing.T) {
	err := fmt.Errorf("resolve: %w", cocoonbox.BoxID("bx_nope").Validate())
	if cocoonbox.ErrorField(err) != "box_id" {
		t.Fatalf("ErrorField = %q, want box_id", cocoonbox.ErrorField(err))
	}
	renamed := cocoonbox.RenameField(err, "box_id", "box")
	if cocoonbox.ErrorCode(renamed) != cocoonbox.EInvalid || cocoonbox.ErrorField(renamed) != "box" {
		t.Fatalf("RenameField = %v", renamed)
	}
	if got, want := cocoonbox.ErrorMessage(renamed), `box: must be bx_ followed by 16 lowercase hex digits, got "bx_nope"`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if cocoonbox.ErrorField(err) != "box_id" {
		t.Error("RenameField changed the original error")
	}
	// Another field, another code, or no domain error at all: returned as it is.
	other := cocoonbox.Invalid("name", "is required")
	nf := cocoonbox.Errorf(cocoonbox.ENotFound, "box not found")
	plain := fmt.Errorf("boom")
	for _, e := range []error{other, nf, plain} {
		if cocoonbox.RenameField(e, "box_id", "box") != e {
			t.Errorf("RenameField changed %v", e)
		}
	}
}
