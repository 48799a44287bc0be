//go:build !linux

package runtime

import (
	"context"
	"net"
	"os"
)

func processSupported() error { return errLinuxOnly }

func startInit(Spec, []string, *os.File) (initProc, error) { return initProc{}, errLinuxOnly }

func dialIn(context.Context, int, string, string) (net.Conn, error) { return nil, errLinuxOnly }

func boxUserns() (int, error)                        { return -1, errLinuxOnly }
func closeUserns(int) error                          { return nil }
func mountIDMappedImage(Spec, int) (string, error)   { return "", errLinuxOnly }
func ownDiskRoot(Spec) error                         { return errLinuxOnly }
func unmountImage(string) error                      { return nil }
func detachedOverlay(Spec, string) (*os.File, error) { return nil, errLinuxOnly }
