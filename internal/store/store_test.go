package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestUserAndToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)

	if n, err := st.CountUsers(ctx); err != nil || n != 0 {
		t.Fatalf("CountUsers on a fresh database = %d, %v", n, err)
	}
	alice, err := st.CreateUser(ctx, store.NewUser{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(alice.ID, "usr_") || alice.Name != "alice" || alice.CreatedAt.IsZero() {
		t.Errorf("CreateUser = %+v", alice)
	}
	if got, err := st.UserByID(ctx, alice.ID); err != nil || got != alice {
		t.Errorf("UserByID = %+v, %v; want %+v", got, err, alice)
	}
	if n, err := st.CountUsers(ctx); err != nil || n != 1 {
		t.Errorf("CountUsers = %d, %v", n, err)
	}

	secret, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := st.CreateToken(ctx, alice.ID, "laptop", store.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.ID, "tok_") || tok.UserID != alice.ID || tok.LastUsedAt != nil || tok.ExpiresAt != nil {
		t.Errorf("CreateToken = %+v", tok)
	}
	u, got, err := st.UserByTokenHash(ctx, store.HashToken(secret))
	if err != nil || u != alice || got.ID != tok.ID {
		t.Fatalf("UserByTokenHash = %+v, %+v, %v", u, got, err)
	}
	_, got, err = st.UserByTokenHash(ctx, store.HashToken(secret))
	if err != nil || got.LastUsedAt == nil {
		t.Errorf("second use: last used %v, %v; want the first use recorded", got.LastUsedAt, err)
	}
}

func TestTokenRejected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice, err := st.CreateUser(ctx, store.NewUser{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := st.CreateUser(ctx, store.NewUser{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	newToken := func(name string) (string, store.Token) {
		secret, err := store.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := st.CreateToken(ctx, alice.ID, name, store.HashToken(secret))
		if err != nil {
			t.Fatal(err)
		}
		return secret, tok
	}

	if _, _, err := st.UserByTokenHash(ctx, store.HashToken("cbx_unknown")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown token: %v, want ErrNotFound", err)
	}

	revoked, tok := newToken("revoked")
	if err := st.RevokeToken(ctx, bob.ID, tok.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bob revoking alice's token: %v, want ErrNotFound", err)
	}
	if err := st.RevokeToken(ctx, alice.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeToken(ctx, alice.ID, tok.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	if _, _, err := st.UserByTokenHash(ctx, store.HashToken(revoked)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoked token: %v, want ErrNotFound", err)
	}

	expired, tok := newToken("expired")
	if err := st.SetTokenExpiry(ctx, tok.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.UserByTokenHash(ctx, store.HashToken(expired)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired token: %v, want ErrNotFound", err)
	}

	later, tok := newToken("later")
	if err := st.SetTokenExpiry(ctx, tok.ID, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.UserByTokenHash(ctx, store.HashToken(later)); err != nil {
		t.Errorf("token expiring later: %v", err)
	}
	if err := st.RevokeToken(ctx, alice.ID, "tok_nosuchtoken"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking an unknown token: %v, want ErrNotFound", err)
	}
}

func TestUserErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	if _, err := st.CreateUser(ctx, store.NewUser{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateUser(ctx, store.NewUser{Name: "alice"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate user: %v, want ErrConflict", err)
	}
	if _, err := st.CreateUser(ctx, store.NewUser{Name: "Not A Name"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("malformed name: %v, want ErrInvalid", err)
	}
	if _, err := st.UserByID(ctx, "usr_nosuchuser"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown user: %v, want ErrNotFound", err)
	}
	if _, err := st.CreateToken(ctx, "usr_nosuchuser", "x", store.HashToken("x")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("token for unknown user: %v, want ErrNotFound", err)
	}
}

func TestInTxRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	boom := errors.New("boom")
	err := st.InTx(ctx, func(q *store.Queries) error {
		if _, err := q.CreateUser(ctx, store.NewUser{Name: "carol"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v", err)
	}
	if n, err := st.CountUsers(ctx); err != nil || n != 0 {
		t.Errorf("after rollback: %d users, %v", n, err)
	}
	err = st.InTx(ctx, func(q *store.Queries) error {
		u, err := q.CreateUser(ctx, store.NewUser{Name: "carol"})
		if err != nil {
			return err
		}
		_, err = q.CreateToken(ctx, u.ID, "ci", store.HashToken("ci"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.CountUsers(ctx); err != nil || n != 1 {
		t.Errorf("after commit: %d users, %v", n, err)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	for _, e := range []store.Event{
		{Actor: "usr_a", BoxID: "bx_1", Action: "box.create", Detail: json.RawMessage(`{"size":"small"}`)},
		{Actor: "worker", BoxID: "bx_1", Action: "box.hibernate"},
		{Actor: "usr_a", Action: "token.create"},
	} {
		if err := st.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.EventsForBox(ctx, "bx_1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Action != "box.hibernate" || got[1].Action != "box.create" {
		t.Fatalf("EventsForBox = %+v", got)
	}
	if string(got[0].Detail) != "{}" || string(got[1].Detail) != `{"size": "small"}` || got[1].At.IsZero() {
		t.Errorf("details %s, %s", got[0].Detail, got[1].Detail)
	}
	newest, err := st.BoxEvents(ctx, "bx_1", 0, 1)
	if err != nil || len(newest) != 1 || newest[0].Action != "box.hibernate" {
		t.Fatalf("BoxEvents newest 1 = %+v, %v", newest, err)
	}
	all, err := st.BoxEvents(ctx, "bx_1", 0, 10)
	if err != nil || len(all) != 2 || all[0].Action != "box.create" || all[1].Action != "box.hibernate" {
		t.Fatalf("BoxEvents oldest first = %+v, %v", all, err)
	}
	after, err := st.BoxEvents(ctx, "bx_1", all[0].ID, 10)
	if err != nil || len(after) != 1 || after[0].ID != all[1].ID {
		t.Fatalf("BoxEvents after %d = %+v, %v", all[0].ID, after, err)
	}
	if err := st.AppendEvent(ctx, store.Event{Actor: "usr_a", Action: "Bad Action"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("malformed action: %v, want ErrInvalid", err)
	}
}

// TestMigrations applies the schema to an empty database from two processes' worth of
// concurrent Opens, then reopens it: the lock serializes the first, the second changes nothing.
func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.EmptyURL(t)
	var wg sync.WaitGroup
	stores := make([]*store.Store, 2)
	errs := make([]error, 2)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = store.Open(ctx, url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if _, err := stores[0].CreateUser(ctx, store.NewUser{Name: "dave"}); err != nil {
		t.Fatal(err)
	}
	stores[0].Close()
	stores[1].Close()

	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	if v, err := st.SchemaVersion(ctx); err != nil || v != 20 {
		t.Errorf("SchemaVersion = %d, %v; want 20", v, err)
	}
	if n, err := st.CountUsers(ctx); err != nil || n != 1 {
		t.Errorf("after reopen: %d users, %v", n, err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Error(err)
	}
}

func TestNewToken(t *testing.T) {
	a, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := store.NewToken()
	if a == b || !strings.HasPrefix(a, store.TokenPrefix) || len(a) != len(store.TokenPrefix)+52 {
		t.Errorf("NewToken = %q, %q", a, b)
	}
	if strings.ToLower(a) != a {
		t.Errorf("NewToken = %q, want lowercase", a)
	}
	if h := store.HashToken(a); len(h) != 32 || string(h) != string(store.HashToken(a)) {
		t.Errorf("HashToken = %x", h)
	}
}
