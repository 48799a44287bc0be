package store

import (
	"context"
	"fmt"
	"time"
)

// BoxUse is what one box used: the hours it ran since a time, and what its snapshots hold in
// the object store now.
type BoxUse struct {
	Box, Name        string
	Owner, OwnerName string
	Hours            float64
	Snapshots        int64
	SnapshotBytes    int64
}

// BoxUsage returns the use since since of user's boxes ("" for everyone's): those not deleted,
// or deleted since then, the longest running first.
func (q *Queries) BoxUsage(ctx context.Context, since time.Time, user string) ([]BoxUse, error) {
	rows, err := q.db.Query(ctx, `
	SELECT b.id, b.name, b.owner_id, coalesce(u.name, ''),
	       (coalesce((SELECT sum(extract(epoch FROM r.ended_at - greatest(r.started_at, $1)))
	                    FROM box_runtime r WHERE r.box_id = b.id AND r.ended_at > $1), 0) +
	        -- greatest() skips a NULL: a box not running has no time under way.
	        CASE WHEN b.running_since IS NULL THEN 0 ELSE extract(epoch FROM now() - greatest(b.running_since, $1)) END
	       )::double precision / 3600,
	       (SELECT count(*) FROM snapshots s WHERE s.box_id = b.id AND s.state = 'complete'),
	       coalesce((SELECT sum(s.bytes) FROM snapshots s WHERE s.box_id = b.id AND s.state = 'complete'), 0)::bigint
	  FROM boxes b LEFT JOIN users u ON u.id = b.owner_id
	 WHERE ($2 = '' OR b.owner_id = $2) AND (b.deleted_at IS NULL OR b.deleted_at >= $1)
	 ORDER BY 5 DESC, b.id`, since, user)
	if err != nil {
		return nil, fmt.Errorf("box usage: %w", mapErr(err))
	}
	defer rows.Close()
	out := []BoxUse{}
	for rows.Next() {
		var u BoxUse
		if err := rows.Scan(&u.Box, &u.Name, &u.Owner, &u.OwnerName, &u.Hours, &u.Snapshots, &u.SnapshotBytes); err != nil {
			return nil, fmt.Errorf("box usage: %w", mapErr(err))
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("box usage: %w", mapErr(err))
	}
	return out, nil
}
