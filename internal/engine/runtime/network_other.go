//go:build !linux

package runtime

import (
	"context"
	"errors"
)

const resolvConfFile = "resolv.conf"

var errNoNetwork = errors.New("box networks need Linux")

type netctl struct{ cfg Network }

func netnsPath(name string) string { return "" }
func boxNetns(id string) string    { return "" }

func (c netctl) setup(context.Context, Spec, bool) error      { return errNoNetwork }
func (c netctl) policy(context.Context, string, Egress) error { return errNoNetwork }
func (c netctl) teardown(context.Context, string) error       { return nil }

func defaultRouteInterface(string) (string, error) { return "", errNoNetwork }
