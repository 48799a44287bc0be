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

// Usage sums the agent runs' model calls since since (zero: DefaultUsageWindow back), grouped
// by user, box, run or model: the caller's own calls, or every user's when all is set, which
// needs an admin. Grouped by user or box, a row's cost sums its models' prices.
func (s *Service) Usage(ctx context.Context, caller store.User, by string, since time.Time, all bool) ([]UsageRow, time.Time, error) {
	if all && !caller.Admin {
		return nil, time.Time{}, cocoonbox.Errorf(cocoonbox.EForbidden, "everyone's usage needs an admin account; without all_users you see your own")
	}
	now := time.Now()
	if since.IsZero() {
		since = now.Add(-DefaultUsageWindow)
	}
	if since.After(now) {
		return nil, time.Time{}, cocoonbox.Invalid("since", fmt.Sprintf("is in the future (%s)", since.Format(time.RFC3339)))
	}
	f := store.UsageFilter{By: by, Since: since, User: caller.ID}
	if all {
		f.User = ""
	}
	rows, err := s.Store.Usage(ctx, f)
	if err != nil {
		return nil, time.Time{}, err
	}
	// A cost needs the model: rows of several models are costed from the model split.
	var split map[string]float64
	if by == store.UsageByUser || by == store.UsageByBox {
		if split, err = s.costsBy(ctx, f); err != nil {
			return nil, time.Time{}, err
		}
	}
	out := make([]UsageRow, 0, len(rows))
	for _, r := range rows {
		row := UsageRow{UsageRow: r}
		if split != nil {
			row.CostUSD = split[r.Key]
		} else {
			row.CostUSD = s.Agent.Prices[r.Model].Cost(r.InputTokens, r.CachedTokens, r.OutputTokens)
		}
		out = append(out, row)
	}
	return out, since, nil
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

// withinBoxHours refuses a create or wake once the boxes of the owner that read names ran their
// monthly box-hours budget. A budget that cannot be read lets it through: the next one checks
// again, and a box is not kept asleep for the ledger's outage.
func (s *Service) withinBoxHours(ctx context.Context, read func(context.Context) (store.BoxHours, error)) error {
	if s.Store == nil {
		return nil
	}
	h, err := read(ctx)
	if err != nil || h.Limit <= 0 || h.Used < h.Limit {
		return nil
	}
	return cocoonbox.Errorf(cocoonbox.EResourceExhausted,
		"budget: the boxes of user %s ran %.2f of their %g box-hours this month (the monthly budget an admin set); running boxes go on, none is created or woken", h.Owner, h.Used, h.Limit)
}
