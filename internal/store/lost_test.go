package store_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestServerConnectionsLost ends every server process of the store's pooled connections, as a
// PostgreSQL restart does, and then uses the store at once, before the pool's own idle ping would
// notice: each kind of call succeeds on its first try instead of failing with "broken pipe".
func TestServerConnectionsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	if _, err := st.CreateUser(ctx, store.NewUser{Name: "alice"}); err != nil {
		t.Fatal(err)
	}

	calls := []struct {
		name string
		call func() error
	}{
		{"QueryRow", func() error { _, err := st.CountUsers(ctx); return err }},
		{"Query", func() error { _, err := st.ListUsers(ctx); return err }},
		{"Exec in a transaction", func() error {
			return st.InTx(ctx, func(q *store.Queries) error { _, err := q.CountUsers(ctx); return err })
		}},
		{"Ping", func() error { return st.Ping(ctx) }},
	}
	for _, c := range calls {
		fillPool(t, st, 3)
		endOtherBackends(t, conn)
		if err := c.call(); err != nil {
			t.Errorf("%s right after the server ended its connections: %v", c.name, err)
		}
	}
}

// fillPool has the store hold n connections at once and then return them idle to its pool.
func fillPool(t *testing.T, st *store.Store, n int) {
	t.Helper()
	release := make(chan struct{})
	held := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := st.InTx(context.Background(), func(q *store.Queries) error {
				_, err := q.CountUsers(context.Background())
				held <- err
				<-release
				return err
			})
			if err != nil {
				held <- err // a failed BEGIN never reached fn
			}
		})
	}
	for range n {
		if err := <-held; err != nil {
			close(release)
			wg.Wait()
			t.Fatalf("holding %d connections: %v", n, err)
		}
	}
	close(release)
	wg.Wait()
}

// endOtherBackends ends the server process of every connection to conn's database but conn's
// own, and waits until they are gone.
func endOtherBackends(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	// With a timeout, pg_terminate_backend waits for the process to exit, and so for its end of
	// the connection to close.
	const others = `FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	rows, err := conn.Query(ctx, `SELECT pg_terminate_backend(pid, 10000) `+others)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil || len(ended) == 0 || slices.Contains(ended, false) {
		t.Fatalf("ending the store's connections: %v, %v", ended, err)
	}
}

// TestServerGoneIsUnavailable: a connection lost where the statement cannot be sent again (inside
// a transaction that has run a statement), and a server nobody answers at, are unavailable errors
// naming PostgreSQL, which callers pass on as such and clients may retry.
func TestServerGoneIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	err := st.InTx(ctx, func(q *store.Queries) error {
		if _, err := q.CountUsers(ctx); err != nil {
			return err
		}
		endOtherBackends(t, conn)
		_, err := q.CountUsers(ctx)
		return err
	})
	if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable || !strings.Contains(cocoonbox.ErrorMessage(err), "PostgreSQL") {
		t.Errorf("a transaction whose connection was ended: %v (code %s)", err, cocoonbox.ErrorCode(err))
	}
	if _, err := st.CountUsers(ctx); err != nil {
		t.Errorf("the next call, on a new connection: %v", err)
	}

	nobody, err := store.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer nobody.Close()
	if _, err := nobody.CountUsers(ctx); cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Errorf("a server nobody answers at: %v (code %s)", err, cocoonbox.ErrorCode(err))
	}
}
