package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox/internal/nodes"
)

const nodeColumns = `id, url, state, memory_mib, committed_mib, max_boxes, boxes, hibernated, warm, heartbeat_at`

func scanNode(row interface{ Scan(...any) error }, n *nodes.Node) error {
	var warm []byte
	if err := row.Scan(&n.ID, &n.URL, &n.State, &n.MemoryMiB, &n.CommittedMiB, &n.MaxBoxes, &n.Boxes, &n.Hibernated, &warm, &n.HeartbeatAt); err != nil {
		return err
	}
	return json.Unmarshal(warm, &n.Warm)
}

// HeartbeatNode records node n's address, capacity and load as of now, registering it on its
// first beat. A lost node that beats again is active again; a draining one stays draining (only
// an operator undoes a drain). A malformed ID is ErrInvalid.
func (q *Queries) HeartbeatNode(ctx context.Context, n nodes.Node) (nodes.Node, error) {
	warm, err := json.Marshal(n.Warm)
	if err != nil {
		return nodes.Node{}, fmt.Errorf("heartbeat node %s: %w", n.ID, err)
	}
	if n.Warm == nil {
		warm = []byte("{}")
	}
	var out nodes.Node
	err = scanNode(q.db.QueryRow(ctx, `
INSERT INTO nodes (id, url, memory_mib, committed_mib, max_boxes, boxes, hibernated, warm)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (id) DO UPDATE SET
    url = EXCLUDED.url, memory_mib = EXCLUDED.memory_mib, committed_mib = EXCLUDED.committed_mib,
    max_boxes = EXCLUDED.max_boxes, boxes = EXCLUDED.boxes, hibernated = EXCLUDED.hibernated,
    warm = EXCLUDED.warm, heartbeat_at = now(),
    state = CASE WHEN nodes.state = 'lost' THEN 'active' ELSE nodes.state END
RETURNING `+nodeColumns,
		n.ID, n.URL, n.MemoryMiB, n.CommittedMiB, n.MaxBoxes, n.Boxes, n.Hibernated, warm), &out)
	if err != nil {
		return nodes.Node{}, fmt.Errorf("heartbeat node %s: %w", n.ID, mapErr(err))
	}
	return out, nil
}

// ListNodes returns every registered node, by ID.
func (q *Queries) ListNodes(ctx context.Context) ([]nodes.Node, error) {
	rows, err := q.db.Query(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodes.Node, error) {
		var n nodes.Node
		return n, scanNode(r, &n)
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", mapErr(err))
	}
	return out, nil
}

// MarkLostNodes marks lost every active or draining node whose heartbeat is older than
// deadAfter (by the database's clock, which every heartbeat is stamped with) and returns them,
// as they are now.
func (q *Queries) MarkLostNodes(ctx context.Context, deadAfter time.Duration) ([]nodes.Node, error) {
	rows, err := q.db.Query(ctx,
		`UPDATE nodes SET state = 'lost' WHERE state <> 'lost' AND heartbeat_at < now() - make_interval(secs => $1) RETURNING `+nodeColumns,
		deadAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("mark lost nodes: %w", mapErr(err))
	}
	lost, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodes.Node, error) {
		var n nodes.Node
		return n, scanNode(r, &n)
	})
	if err != nil {
		return nil, fmt.Errorf("mark lost nodes: %w", mapErr(err))
	}
	return lost, nil
}

// SandboxOnNode is a live box whose sandbox a node holds.
type SandboxOnNode struct {
	BoxID     string
	SandboxID string
}

// SandboxesOn returns the live boxes whose sandbox node n holds: their sandbox_node names it, or,
// for a sandbox recorded before nodes were named (schema 14), their sandbox_addr is its URL.
func (q *Queries) SandboxesOn(ctx context.Context, n nodes.Node) ([]SandboxOnNode, error) {
	rows, err := q.db.Query(ctx,
		`SELECT id, sandbox_id FROM boxes
		  WHERE deleted_at IS NULL AND sandbox_id IS NOT NULL
		    AND (sandbox_node = $1 OR sandbox_node = '' AND sandbox_addr = $2 AND $2 <> '')
		  ORDER BY id`, n.ID, n.URL)
	if err != nil {
		return nil, fmt.Errorf("sandboxes on %s: %w", n.ID, mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SandboxOnNode, error) {
		var s SandboxOnNode
		return s, r.Scan(&s.BoxID, &s.SandboxID)
	})
	if err != nil {
		return nil, fmt.Errorf("sandboxes on %s: %w", n.ID, mapErr(err))
	}
	return out, nil
}

// NotePlaced counts a box of mib MiB just claimed on node id into its record, so placements
// before the node's next heartbeat (which replaces the figures with the engine's own) see it: a
// burst of creates spreads over the nodes instead of all following one stale record. An unknown
// node is ErrNotFound.
func (q *Queries) NotePlaced(ctx context.Context, id string, mib int64) error {
	tag, err := q.db.Exec(ctx, `UPDATE nodes SET committed_mib = committed_mib + $2, boxes = boxes + 1 WHERE id = $1`, id, mib)
	if err != nil {
		return fmt.Errorf("note a box placed on node %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("note a box placed on node %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetNodeDraining marks node id draining (placement puts no new box on it) or, with draining
// false, active again. A lost node is neither: it is ErrConflict, since a node comes back from
// lost only by beating again. An unknown node is ErrNotFound.
func (q *Queries) SetNodeDraining(ctx context.Context, id string, draining bool) (nodes.Node, error) {
	to := nodes.Active
	if draining {
		to = nodes.Draining
	}
	var n nodes.Node
	err := scanNode(q.db.QueryRow(ctx,
		`UPDATE nodes SET state = $2 WHERE id = $1 AND state <> 'lost' RETURNING `+nodeColumns, id, to), &n)
	if err == nil {
		return n, nil
	}
	if err = mapErr(err); !errors.Is(err, ErrNotFound) {
		return nodes.Node{}, fmt.Errorf("set node %s %s: %w", id, to, err)
	}
	if err := scanNode(q.db.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = $1`, id), &n); err != nil {
		return nodes.Node{}, fmt.Errorf("node %s: %w", id, mapErr(err))
	}
	return nodes.Node{}, fmt.Errorf("set node %s %s: %w: it is lost; it comes back when its worker beats again", id, to, ErrConflict)
}
