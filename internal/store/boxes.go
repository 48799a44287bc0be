package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
)

// Box is a box row: the domain record plus what only the control plane needs to know.
type Box struct {
	cocoonbox.Box
	SandboxID string     // the engine's sandbox for the box; empty before the first claim
	DeletedAt *time.Time // set exactly when State is deleted
}

// NewBox is what CreateBox needs. The ID is chosen by the caller (the API, before it starts the
// box workflow), which is what makes a retried create recognizable.
type NewBox struct {
	ID    cocoonbox.BoxID
	Owner string // user ID
	Name  string
	Size  cocoonbox.Size
	// Parent and ForkedAt are a fork's lineage; empty for a box created afresh.
	Parent   cocoonbox.BoxID
	ForkedAt time.Time
}

const boxColumns = `id, owner_id, name, size, state, coalesce(sandbox_id, ''), coalesce(last_error, ''),
	created_at, updated_at, deleted_at, coalesce(parent_id, ''), forked_at`

func scanBox(row interface{ Scan(...any) error }, b *Box) error {
	var forkedAt *time.Time
	err := row.Scan(&b.ID, &b.Owner, &b.Name, &b.Size, &b.State, &b.SandboxID, &b.Reason,
		&b.CreatedAt, &b.UpdatedAt, &b.DeletedAt, &b.Parent, &forkedAt)
	if forkedAt != nil {
		b.ForkedAt = *forkedAt
	}
	return err
}

// CreateBox adds a box in state creating. It is idempotent, because the workflow's create
// activity may run more than once: creating an ID that exists with the same owner, name and size
// returns the existing row unchanged. The same ID with other fields, or an ID whose box was
// deleted, is ErrConflict, and so is a name the owner already uses for a box that is not deleted.
// An unknown owner is ErrNotFound; a malformed ID, name or size is ErrInvalid, also matching the
// *cocoonbox.Error that names the field.
func (q *Queries) CreateBox(ctx context.Context, nb NewBox) (Box, error) {
	if err := (&cocoonbox.Box{ID: nb.ID, Name: nb.Name, Size: nb.Size}).Validate(); err != nil {
		return Box{}, fmt.Errorf("create box %s: %w: %w", nb.ID, err, ErrInvalid)
	}
	if nb.Owner == "" {
		return Box{}, fmt.Errorf("create box %s: %w: %w", nb.ID, cocoonbox.Invalid("owner", "is required"), ErrInvalid)
	}
	var b Box
	// ON CONFLICT names the primary key only, so a taken (owner, name) still fails as a unique
	// violation, while a repeated ID returns no row and is compared below.
	err := scanBox(q.db.QueryRow(ctx,
		`INSERT INTO boxes (id, owner_id, name, size, state, parent_id, forked_at)
		 VALUES ($1, $2, $3, $4, 'creating', nullif($5, ''), $6)
		 ON CONFLICT (id) DO NOTHING RETURNING `+boxColumns,
		nb.ID, nb.Owner, nb.Name, nb.Size, nb.Parent, forkedAt(nb.ForkedAt),
	), &b)
	if err == nil {
		return b, nil
	}
	if err = mapErr(err); !errors.Is(err, ErrNotFound) {
		return Box{}, fmt.Errorf("create box %s: %w", nb.ID, err)
	}
	b, err = q.BoxByID(ctx, nb.ID)
	if err != nil {
		return Box{}, fmt.Errorf("create box %s: %w", nb.ID, err)
	}
	switch {
	case b.Owner != nb.Owner || b.Name != nb.Name || b.Size != nb.Size:
		return Box{}, fmt.Errorf("create box %s: %w: the ID is taken by a box with other fields", nb.ID, ErrConflict)
	case b.DeletedAt != nil:
		return Box{}, fmt.Errorf("create box %s: %w: the box was deleted and its ID is not reused", nb.ID, ErrConflict)
	}
	return b, nil
}

// forkedAt is t for its column: NULL when the box is not a fork.
func forkedAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// BoxByID returns the box with id, deleted or not, or ErrNotFound.
func (q *Queries) BoxByID(ctx context.Context, id cocoonbox.BoxID) (Box, error) {
	var b Box
	if err := scanBox(q.db.QueryRow(ctx, `SELECT `+boxColumns+` FROM boxes WHERE id = $1`, id), &b); err != nil {
		return Box{}, fmt.Errorf("box %s: %w", id, mapErr(err))
	}
	return b, nil
}

// ListBoxes returns owner's boxes that are not deleted, newest first; none is an empty list, not
// an error.
func (q *Queries) ListBoxes(ctx context.Context, owner string) ([]Box, error) {
	return q.listBoxes(ctx, owner, false)
}

// ListBoxesWithDeleted is ListBoxes including deleted boxes, for audit and admin views.
func (q *Queries) ListBoxesWithDeleted(ctx context.Context, owner string) ([]Box, error) {
	return q.listBoxes(ctx, owner, true)
}

func (q *Queries) listBoxes(ctx context.Context, owner string, withDeleted bool) ([]Box, error) {
	rows, err := q.db.Query(ctx,
		`SELECT `+boxColumns+` FROM boxes WHERE owner_id = $1 AND ($2 OR deleted_at IS NULL)
		 ORDER BY created_at DESC, id DESC`, owner, withDeleted)
	if err != nil {
		return nil, fmt.Errorf("list boxes of %s: %w", owner, mapErr(err))
	}
	defer rows.Close()
	boxes := []Box{}
	for rows.Next() {
		var b Box
		if err := scanBox(rows, &b); err != nil {
			return nil, fmt.Errorf("list boxes of %s: %w", owner, mapErr(err))
		}
		boxes = append(boxes, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list boxes of %s: %w", owner, mapErr(err))
	}
	return boxes, nil
}

// StaleTransientBoxes returns the live boxes in a state an operation passes through (creating,
// waking, …) that have not changed since before, oldest first, at most limit: the ones a
// reconciler checks against their workflow.
func (q *Queries) StaleTransientBoxes(ctx context.Context, before time.Time, limit int) ([]Box, error) {
	var transient []string
	for _, st := range cocoonbox.BoxStates {
		if st.Transient() {
			transient = append(transient, string(st))
		}
	}
	rows, err := q.db.Query(ctx,
		`SELECT `+boxColumns+` FROM boxes WHERE deleted_at IS NULL AND state = ANY($1) AND updated_at < $2
		 ORDER BY updated_at, id LIMIT $3`, transient, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list stale transient boxes: %w", mapErr(err))
	}
	boxes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Box, error) {
		var b Box
		return b, scanBox(r, &b)
	})
	if err != nil {
		return nil, fmt.Errorf("list stale transient boxes: %w", mapErr(err))
	}
	return boxes, nil
}

// setBoxState changes state and reason together, so a box never shows a stale failure reason.
// A new sandbox ID replaces the old one and drops the old sandbox's token, which would not work
// on the new one; an empty sandbox ID keeps the current sandbox and token. Entering deleted stamps
// deleted_at (the table requires both together) and drops the token, which dies with the sandbox.
// A deleted box is final and is not updated. (SET expressions all see the row as it was.)
// setBoxState also keeps the box's running time (box_runtime, boxes.running_since): a time
// starts when the row says running and ends when it says a state of stoppedStates.
const setBoxState = `
WITH old AS (SELECT owner_id, running_since FROM boxes WHERE id = $1 AND deleted_at IS NULL),
up AS (
UPDATE boxes SET
    state = $2,
    last_error = NULLIF($4, ''),
    sandbox_token_ciphertext = CASE
        WHEN $2 = 'deleted' THEN NULL
        WHEN $3 = '' OR $3 = sandbox_id THEN sandbox_token_ciphertext END,
    sandbox_addr = CASE
        WHEN $2 = 'deleted' THEN ''
        WHEN $3 = '' OR $3 = sandbox_id THEN sandbox_addr
        ELSE '' END,
    sandbox_node = CASE
        WHEN $2 = 'deleted' THEN ''
        WHEN $3 = '' OR $3 = sandbox_id THEN sandbox_node
        ELSE '' END,
    sandbox_id = coalesce(NULLIF($3, ''), sandbox_id),
    deleted_at = CASE WHEN $2 = 'deleted' THEN now() END,
    running_since = CASE
        WHEN $2 = 'running' THEN coalesce(running_since, now())
        WHEN $2 IN ` + stoppedStates + ` THEN NULL
        ELSE running_since END,
    updated_at = now()
WHERE id = $1 AND deleted_at IS NULL
RETURNING id),
ran AS (
INSERT INTO box_runtime (box_id, user_id, started_at, ended_at)
SELECT $1, old.owner_id, old.running_since, greatest(now(), old.running_since) FROM old, up
 WHERE old.running_since IS NOT NULL AND $2 IN ` + stoppedStates + `)
SELECT count(*) FROM up`

// stoppedStates end a box's running time.
const stoppedStates = `('hibernating', 'hibernated', 'deleting', 'deleted', 'failed')`

// SetBoxState records that box id is now in state, with reason saying why when state is failed
// (any other state clears the reason). sandboxID, when not empty, is the box's sandbox from now
// on. Setting deleted on a deleted box does nothing; any other change to a deleted box is
// ErrConflict. An unknown box is ErrNotFound, an unknown state ErrInvalid, and a sandbox ID
// another live box holds ErrConflict.
func (q *Queries) SetBoxState(ctx context.Context, id cocoonbox.BoxID, state cocoonbox.BoxState, sandboxID, reason string) error {
	if err := state.Validate(); err != nil {
		return fmt.Errorf("set box %s state: %w: %w", id, err, ErrInvalid)
	}
	var n int
	if err := q.db.QueryRow(ctx, setBoxState, id, state, sandboxID, reason).Scan(&n); err != nil {
		return fmt.Errorf("set box %s state %s: %w", id, state, mapErr(err))
	}
	if n == 0 {
		if err := q.whyUnchanged(ctx, id, state == cocoonbox.BoxStateDeleted); err != nil {
			return fmt.Errorf("set box %s state %s: %w", id, state, err)
		}
	}
	return nil
}

// MarkBoxDeleted moves box id to deleted and forgets its sandbox token; the name becomes free
// for a new box. Deleting a deleted box does nothing, so a failed delete can be retried; an
// unknown box is ErrNotFound.
func (q *Queries) MarkBoxDeleted(ctx context.Context, id cocoonbox.BoxID) error {
	return q.SetBoxState(ctx, id, cocoonbox.BoxStateDeleted, "", "")
}

// SetSandboxToken stores the engine credential for box id's sandbox, sealed by the caller (see
// SandboxTokens), together with the sandbox it opens and where it is: addr, the engine a redirect
// named (empty otherwise), and node, the registered node that holds it (empty when none is
// known), so they cannot disagree. An unknown box is ErrNotFound, a deleted one ErrConflict.
func (q *Queries) SetSandboxToken(ctx context.Context, id cocoonbox.BoxID, sandboxID, addr, node string, ciphertext []byte) error {
	if sandboxID == "" || len(ciphertext) == 0 {
		return fmt.Errorf("set sandbox token of box %s: %w: sandbox ID and ciphertext are required", id, ErrInvalid)
	}
	tag, err := q.db.Exec(ctx,
		`UPDATE boxes SET sandbox_id = $2, sandbox_addr = $3, sandbox_node = $4, sandbox_token_ciphertext = $5,
		        updated_at = now()
		 WHERE id = $1 AND deleted_at IS NULL`, id, sandboxID, addr, node, ciphertext)
	if err != nil {
		return fmt.Errorf("set sandbox token of box %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set sandbox token of box %s: %w", id, q.whyUnchanged(ctx, id, false))
	}
	return nil
}

// SandboxLocation is where a box's sandbox is, as its row says.
type SandboxLocation struct {
	SandboxID string
	// Addr is the engine to call: the one a redirect named, else the address of the node that
	// holds the sandbox as its record says now, else empty (the configured engine).
	Addr string
	Node string // the registered node that holds it; empty when none is known
}

// SandboxToken returns where box id's sandbox is and its sealed token. A box that is unknown,
// deleted, or has no token yet is ErrNotFound: in every case there is no sandbox to talk to.
func (q *Queries) SandboxToken(ctx context.Context, id cocoonbox.BoxID) (loc SandboxLocation, ciphertext []byte, err error) {
	err = q.db.QueryRow(ctx,
		`SELECT b.sandbox_id, CASE WHEN b.sandbox_addr <> '' THEN b.sandbox_addr ELSE coalesce(n.url, '') END,
		        b.sandbox_node, b.sandbox_token_ciphertext
		   FROM boxes b LEFT JOIN nodes n ON n.id = b.sandbox_node AND b.sandbox_node <> ''
		  WHERE b.id = $1 AND b.deleted_at IS NULL AND b.sandbox_token_ciphertext IS NOT NULL`, id,
	).Scan(&loc.SandboxID, &loc.Addr, &loc.Node, &ciphertext)
	if err != nil {
		return SandboxLocation{}, nil, fmt.Errorf("sandbox token of box %s: %w", id, mapErr(err))
	}
	return loc, ciphertext, nil
}

// whyUnchanged explains an update of a live box that touched no row: the box does not exist
// (ErrNotFound) or is deleted (ErrConflict, or nil when deletedOK).
func (q *Queries) whyUnchanged(ctx context.Context, id cocoonbox.BoxID, deletedOK bool) error {
	b, err := q.BoxByID(ctx, id)
	switch {
	case err != nil:
		return err
	case b.DeletedAt == nil:
		// It was deleted and undeleted in between, which nothing does; say so rather than guess.
		return fmt.Errorf("box %s changed concurrently", id)
	case deletedOK:
		return nil
	}
	return fmt.Errorf("box %s: %w: it is deleted", id, ErrConflict)
}

// SetBoxPolicy keeps a copy of the box's policy (JSON, as the API holds it) on its row.
func (q *Queries) SetBoxPolicy(ctx context.Context, id cocoonbox.BoxID, policy []byte) error {
	tag, err := q.db.Exec(ctx, `UPDATE boxes SET policy = $2 WHERE id = $1`, id, policy)
	if err != nil {
		return fmt.Errorf("set box %s policy: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set box %s policy: %w", id, ErrNotFound)
	}
	return nil
}

// BoxPolicy returns the copy of the box's policy on its row: {} for a box whose row has none.
func (q *Queries) BoxPolicy(ctx context.Context, id cocoonbox.BoxID) ([]byte, error) {
	var p []byte
	if err := q.db.QueryRow(ctx, `SELECT policy FROM boxes WHERE id = $1`, id).Scan(&p); err != nil {
		return nil, fmt.Errorf("box %s policy: %w", id, mapErr(err))
	}
	return p, nil
}
