//go:build !linux

package runtime

import (
	"context"
	"net"
)

func processSupported() error { return errLinuxOnly }

func startInit(Spec, []string) (initProc, error) { return initProc{}, errLinuxOnly }

func dialIn(context.Context, int, string, string) (net.Conn, error) { return nil, errLinuxOnly }
