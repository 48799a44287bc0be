package boxsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Pool is one warm pool of the engine: Target boxes of Template, Size and Net kept booted ahead
// of creates, Ready of them now and Starting booting.
type Pool struct {
	Template, Size, Net     string
	Target, Ready, Starting int
}

func poolsOf(info sandbox.Info) []Pool {
	out := make([]Pool, 0, len(info.Pools))
	for _, p := range info.Pools {
		out = append(out, Pool{Template: p.Key.Template, Size: p.Key.Size, Net: p.Key.Net, Target: p.Target, Ready: p.Warm, Starting: p.Refilling})
	}
	return out
}

// Pools returns the engine's warm pools (the caller checked it is an operator).
func (s *Service) Pools(ctx context.Context) ([]Pool, error) {
	if s.Link == nil || s.Link.Sandbox == nil {
		return nil, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the engine cannot be reached from this server", Err: errUnavailable}
	}
	info, err := s.Link.Sandbox.Info(ctx)
	if err != nil {
		return nil, engineError("read the engine's warm pools", err)
	}
	return poolsOf(info), nil
}

// SetPools replaces the engine's warm pools; pools left out drain (the caller checked it is an
// operator): each one's Template, Size, Net and Target. A pool is refused naming its index and
// field.
func (s *Service) SetPools(ctx context.Context, want []Pool) ([]Pool, error) {
	if s.Link == nil || s.Link.Sandbox == nil {
		return nil, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the engine cannot be reached from this server", Err: errUnavailable}
	}
	seen := map[sandbox.PoolKey]bool{}
	pools := make([]sandbox.PoolSpec, len(want))
	for i, w := range want {
		p := sandbox.PoolSpec{Template: w.Template, Size: w.Size, Net: w.Net, Warm: w.Target}
		pools[i] = p
		field := func(f string) string { return fmt.Sprintf("pools[%d].%s", i, f) }
		switch {
		case p.Template == "":
			return nil, cocoonbox.Invalid(field("template"), "is required")
		case p.Size != "" && !slices.Contains(cocoonbox.Sizes, cocoonbox.Size(p.Size)):
			return nil, cocoonbox.Invalid(field("size"), fmt.Sprintf("unknown size %q, want one of %v", p.Size, cocoonbox.Sizes))
		case p.Net != "" && p.Net != sandbox.NetNone && p.Net != sandbox.NetEgress:
			return nil, cocoonbox.Invalid(field("net"), fmt.Sprintf("must be %s or %s, got %q", sandbox.NetNone, sandbox.NetEgress, p.Net))
		case p.Warm < 0 || p.Warm > config.MaxPoolWarm:
			return nil, cocoonbox.Invalid(field("target"), fmt.Sprintf("must be 0 to %d, got %d", config.MaxPoolWarm, p.Warm))
		}
		if p.Size == "" {
			pools[i].Size = sandbox.SizeSmall
		}
		if p.Net == "" {
			pools[i].Net = sandbox.NetNone
		}
		k := sandbox.PoolKey{Template: p.Template, Net: pools[i].Net, Size: pools[i].Size}
		if seen[k] {
			return nil, cocoonbox.Invalid(field("template"), fmt.Sprintf("repeats the pool %s/%s on lane %s", k.Template, k.Size, k.Net))
		}
		seen[k] = true
	}
	info, err := s.Link.Sandbox.SetPools(ctx, pools)
	if err != nil {
		return nil, engineError("set the engine's warm pools", err)
	}
	return poolsOf(info), nil
}

// engineError is a failed call to the engine as a domain error: the engine's own refusal (a
// template it has no image of) is the caller's to fix, anything else is unavailable.
func engineError(what string, err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 {
		return cocoonbox.Errorf(cocoonbox.EInvalid, "%s: the engine refused: %s", what, se.Message)
	}
	return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: what + ": the engine is not answering; try again", Err: err}
}
