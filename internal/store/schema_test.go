package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestSchemaConstraints exercises the constraints in SQL directly (the tables with queries also
// through them), so they are known to accept the rows the workflows will write and to refuse the
// ones they must not.
func TestSchemaConstraints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ok := []string{
		`INSERT INTO users (id, name) VALUES ('usr_aaaa', 'erin'), ('usr_bbbb', 'frank')`,
		`INSERT INTO boxes (id, owner_id, name, size, state) VALUES ('bx_0123456789abcdef', 'usr_aaaa', 'dev', 'small', 'creating')`,
		`INSERT INTO shares (box_id, user_id, role) VALUES ('bx_0123456789abcdef', 'usr_bbbb', 'driver')`,
		`INSERT INTO snapshots (id, box_id, state, object_key) VALUES ('s1', 'bx_0123456789abcdef', 'uploading', 'k/s1')`,
		`UPDATE snapshots SET state = 'complete', bytes = 10, sha256 = sha256('x'), file_count = 1 WHERE id = 's1'`,
		`INSERT INTO secrets (owner_id, name, ciphertext, nonce, wrapped_key, key_id) VALUES ('usr_aaaa', 'OPENAI_KEY', '\x00', '\x000102030405060708090a0b', '\x00', 'k1')`,
		`INSERT INTO agent_runs (id, box_id, owner_id, state, model) VALUES ('r1', 'bx_0123456789abcdef', 'usr_aaaa', 'running', 'm')`,
		`INSERT INTO agent_steps (run_id, step, kind, payload) VALUES ('r1', 0, 'model_turn', '{"object":"k/r1/0"}')`,
		`UPDATE agent_runs SET state = 'succeeded', ended_at = now() WHERE id = 'r1'`,
		`UPDATE boxes SET state = 'deleted', deleted_at = now() WHERE id = 'bx_0123456789abcdef'`,
		`INSERT INTO boxes (id, owner_id, name, size, state) VALUES ('bx_fedcba9876543210', 'usr_aaaa', 'dev', 'small', 'creating')`,
	}
	for _, sql := range ok {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	bad := []string{
		`INSERT INTO boxes (id, owner_id, name, size, state) VALUES ('bx_1', 'usr_aaaa', 'x', 'small', 'creating')`,
		`INSERT INTO boxes (id, owner_id, name, size, state) VALUES ('bx_1111111111111111', 'usr_aaaa', 'dev', 'small', 'creating')`,
		`INSERT INTO boxes (id, owner_id, name, size, state) VALUES ('bx_2222222222222222', 'usr_aaaa', 'y', 'huge', 'creating')`,
		`INSERT INTO shares (box_id, user_id, role) VALUES ('bx_fedcba9876543210', 'usr_bbbb', 'owner')`,
		`INSERT INTO snapshots (id, box_id, state, object_key) VALUES ('s2', 'bx_fedcba9876543210', 'complete', 'k/s2')`,
		`INSERT INTO secrets (owner_id, name, ciphertext, nonce, wrapped_key, key_id) VALUES ('usr_aaaa', 'OPENAI_KEY', '\x00', '\x000102030405060708090a0b', '\x00', 'k1')`,
		`INSERT INTO agent_steps (run_id, step, kind) VALUES ('r1', 0, 'model_turn')`,
		`UPDATE agent_runs SET state = 'running' WHERE id = 'r1'`,
	}
	for _, sql := range bad {
		if _, err := conn.Exec(ctx, sql); err == nil {
			t.Errorf("accepted: %s", sql)
		}
	}
}
