//go:build !linux

package runtime

import "context"

func confinedCopy(context.Context, string, string) error { return errLinuxOnly }
