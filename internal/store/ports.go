package store

import (
	"context"
	"fmt"
)

// SetPortPublic makes port of box public (by user) or private again; either is idempotent.
func (q *Queries) SetPortPublic(ctx context.Context, boxID string, port int, public bool, user string) error {
	var err error
	if public {
		_, err = q.db.Exec(ctx, `INSERT INTO public_ports (box_id, port, set_by) VALUES ($1, $2, $3)
			ON CONFLICT (box_id, port) DO NOTHING`, boxID, port, user)
	} else {
		_, err = q.db.Exec(ctx, `DELETE FROM public_ports WHERE box_id = $1 AND port = $2`, boxID, port)
	}
	if err != nil {
		return fmt.Errorf("set port public: %w", mapErr(err))
	}
	return nil
}

// PublicPorts returns the box's public ports, sorted.
func (q *Queries) PublicPorts(ctx context.Context, boxID string) ([]int, error) {
	rows, err := q.db.Query(ctx, `SELECT port FROM public_ports WHERE box_id = $1 ORDER BY port`, boxID)
	if err != nil {
		return nil, fmt.Errorf("public ports: %w", mapErr(err))
	}
	defer rows.Close()
	var ports []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("public ports: %w", mapErr(err))
		}
		ports = append(ports, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("public ports: %w", mapErr(err))
	}
	return ports, nil
}

// PortPublic says whether port of box is public.
func (q *Queries) PortPublic(ctx context.Context, boxID string, port int) (bool, error) {
	var ok bool
	err := q.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public_ports WHERE box_id = $1 AND port = $2)`, boxID, port).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("port public: %w", mapErr(err))
	}
	return ok, nil
}
