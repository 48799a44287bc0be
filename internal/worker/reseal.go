package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
)

// ResealEvery is how often a worker looks for values sealed with a key other than the primary.
const ResealEvery = 10 * time.Minute

// resealBatch is how many values one query of a re-seal reads.
const resealBatch = 100

// Resealer seals again, under the keyring's primary key, every stored value that an older key
// sealed (`cocoonbox admin keyring rotate` made a new primary): sandbox tokens, vault secrets'
// data keys and webhook secrets. Each value is replaced only if its row still holds what was
// read, so a value written meanwhile is kept. Once none is left, the older keys may go from the
// key file. Every worker runs one; they may overlap, since each replacement is a compare-and-swap.
type Resealer struct {
	Store  *store.Store
	Keys   *secrets.Keyring
	Every  time.Duration // 0 is ResealEvery
	Logger *slog.Logger
}

// StartResealer runs r until the returned func, which waits for it to stop.
func StartResealer(r *Resealer) (stop func()) { return runLoop(r.Run) }

// Run re-seals every r.Every until ctx ends. The first pass waits a period too, so the hosts of a
// deployment have the rotated key file before stored values stop opening with the old one alone.
func (r *Resealer) Run(ctx context.Context) {
	every := r.Every
	if every <= 0 {
		every = ResealEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("re-seal under the primary key", "key", r.Keys.KeyID(), "resealed", n, "err", err)
		} else if n > 0 {
			r.Logger.Info("re-sealed under the primary key", "key", r.Keys.KeyID(), "values", n)
		}
	}
}

// Once re-seals what it finds sealed with another key than the primary and reports how many it
// replaced. A value no key of the keyring opens is left as it is and counted in the error.
func (r *Resealer) Once(ctx context.Context) (int, error) {
	if r.Keys.KeyCount() == 1 {
		return 0, nil // a keyring never rotated sealed everything with its one key
	}
	prefix := r.Keys.PrimaryPrefix()
	n := 0
	var errs []error
	for _, kind := range store.SealedKinds {
		for {
			stale, err := r.Store.StaleSealed(ctx, kind, prefix, resealBatch)
			if err != nil {
				return n, err
			}
			replaced := 0
			for _, s := range stale {
				ok, err := r.reseal(ctx, s)
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					replaced++
				}
			}
			n += replaced
			// A batch with nothing replaced holds only values that do not open (or that changed
			// meanwhile, sealed with the primary): the next pass looks again.
			if len(stale) < resealBatch || replaced == 0 {
				break
			}
		}
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%d values were left sealed with an older key: %w", len(errs), errors.Join(errs[:min(len(errs), 3)]...))
	}
	return n, nil
}

// reseal opens s with the keyring and seals it under the primary key in its place.
func (r *Resealer) reseal(ctx context.Context, s store.Sealed) (bool, error) {
	aad, err := sealedAAD(s)
	if err != nil {
		return false, err
	}
	plain, err := r.Keys.Open(s.Blob, aad)
	if err != nil {
		return false, fmt.Errorf("%s of %s: %w", s.Kind, s.Row, err)
	}
	defer clear(plain)
	blob, err := r.Keys.Seal(plain, aad)
	if err != nil {
		return false, fmt.Errorf("%s of %s: %w", s.Kind, s.Row, err)
	}
	return r.Store.ReplaceSealed(ctx, s, blob, r.Keys.KeyID())
}

// sealedAAD is what s was sealed bound to: each column's own AAD for its row.
func sealedAAD(s store.Sealed) ([]byte, error) {
	switch s.Kind {
	case store.SealedSandboxToken:
		return store.SandboxTokenAAD(s.Row), nil
	case store.SealedSecret:
		owner, name, ok := strings.Cut(s.Row, "/")
		if !ok {
			return nil, fmt.Errorf("secret %q: not owner/name", s.Row)
		}
		return vault.AAD(owner, name), nil
	case store.SealedWebhookSecret:
		return activities.WebhookSecretAAD(s.Row), nil
	}
	return nil, fmt.Errorf("no sealed column %q", s.Kind)
}
