package boxsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// DefaultUsageWindow is how far back a usage request without a start looks.
const DefaultUsageWindow = 30 * 24 * time.Hour

// UsageRow is one group of the ledger with its cost at the configured prices.
type UsageRow struct {
	store.UsageRow
	CostUSD float64
}

// Usage is a usage report: the ledger's groups and what the boxes used besides tokens.
type Usage struct {
	Rows  []UsageRow
	Boxes []store.BoxUse
	Since time.Time
}

// Usage sums the agent runs' model calls since since (zero: DefaultUsageWindow back), grouped
// by user, box, run or model, with the boxes' running hours since then and their snapshots'
// bytes: the caller's own, or every user's when all is set, which needs an admin. Grouped by
// user or box, a row's cost sums its models' prices.
func (s *Service) Usage(ctx context.Context, caller store.User, by string, since time.Time, all bool) (Usage, error) {
	if all && !caller.Admin {
		return Usage{}, cocoonbox.Errorf(cocoonbox.EForbidden, "everyone's usage needs an admin account; without all_users you see your own")
	}
	now := time.Now()
	if since.IsZero() {
		since = now.Add(-DefaultUsageWindow)
	}
	if since.After(now) {
		return Usage{}, cocoonbox.Invalid("since", fmt.Sprintf("is in the future (%s)", since.Format(time.RFC3339)))
	}
	f := store.UsageFilter{By: by, Since: since, User: caller.ID}
	if all {
		f.User = ""
	}
	rows, err := s.Store.Usage(ctx, f)
	if err != nil {
		return Usage{}, err
	}
	// A cost needs the model: rows of several models are costed from the model split.
	var split map[string]float64
	if by == store.UsageByUser || by == store.UsageByBox {
		if split, err = s.costsBy(ctx, f); err != nil {
			return Usage{}, err
		}
	}
	out := Usage{Rows: make([]UsageRow, 0, len(rows)), Since: since}
	for _, r := range rows {
		row := UsageRow{UsageRow: r}
		if split != nil {
			row.CostUSD = split[r.Key]
		} else {
			row.CostUSD = s.Agent.Prices[r.Model].Cost(r.InputTokens, r.CachedTokens, r.OutputTokens)
		}
		out.Rows = append(out.Rows, row)
	}
	if out.Boxes, err = s.Store.BoxUsage(ctx, since, f.User); err != nil {
		return Usage{}, err
	}
	return out, nil
}

// costsBy is the cost of f's groups, each summed over its models.
func (s *Service) costsBy(ctx context.Context, f store.UsageFilter) (map[string]float64, error) {
	rows, err := s.Store.UsageByModelOf(ctx, f)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, r := range rows {
		out[r.Key] += s.Agent.Prices[r.Model].Cost(r.InputTokens, r.CachedTokens, r.OutputTokens)
	}
	return out, nil
}

// withinBoxHours refuses a create or wake (Wake, or a driver's use of a sleeping box) once the
// boxes of the owner that read names ran their
// monthly box-hours budget. A budget that cannot be read lets it through: the next one checks
// again, and a box is not kept asleep for the ledger's outage.
func (s *Service) withinBoxHours(ctx context.Context, read func(context.Context) (store.BoxHours, error)) error {
	if s.Store == nil {
		return nil
	}
	h, err := read(ctx)
	if err != nil {
		return nil
	}
	return h.Refusal()
}
