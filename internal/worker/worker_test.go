package worker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

func TestDomainErr(t *testing.T) {
	plain := errors.New("connection reset")
	validation := cocoonbox.Invalid("name", "is required")
	cases := []struct {
		in   error
		code string
	}{
		{fmt.Errorf("create box: %w", store.ErrConflict), cocoonbox.EConflict},
		{fmt.Errorf("set box state: %w", store.ErrNotFound), cocoonbox.ENotFound},
		{fmt.Errorf("create box: %w", store.ErrInvalid), cocoonbox.EInvalid},
		{validation, cocoonbox.EInvalid},
		{plain, cocoonbox.EInternal},
	}
	for _, tc := range cases {
		got := domainErr(tc.in)
		if cocoonbox.ErrorCode(got) != tc.code || !errors.Is(got, tc.in) {
			t.Errorf("domainErr(%v) = %v (code %q), want code %q keeping the cause", tc.in, got, cocoonbox.ErrorCode(got), tc.code)
		}
	}
	if domainErr(nil) != nil {
		t.Error("domainErr(nil) != nil")
	}
}
