//go:build !linux

package runtime

import (
	"context"
	"io"
)

func confinedCopy(context.Context, string, string) error { return errLinuxOnly }

func confinedCopySince(context.Context, string, string, []byte, io.Writer) error { return errLinuxOnly }
