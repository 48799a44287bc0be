package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestSpendTicket: a ticket is spent once, even by racing callers (two API replicas); spending
// drops the rows of tickets expired for a while.
func TestSpendTicket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	exp := time.Now().Add(time.Minute)

	var first atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := st.SpendTicket(ctx, "tk_a", exp)
			if err != nil {
				t.Error(err)
			}
			if ok {
				first.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := first.Load(); n != 1 {
		t.Fatalf("%d of 8 racing spends of one ticket were its first use, want 1", n)
	}
	if ok, err := st.SpendTicket(ctx, "tk_b", exp); err != nil || !ok {
		t.Fatalf("another ticket: %v, %v", ok, err)
	}
	// Given back (its connection failed before it opened), a ticket is spent anew once.
	if err := st.UnspendTicket(ctx, "tk_b"); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.SpendTicket(ctx, "tk_b", exp); err != nil || !ok {
		t.Fatalf("tk_b given back: %v, %v; want its first use again", ok, err)
	}
	if ok, err := st.SpendTicket(ctx, "tk_b", exp); err != nil || ok {
		t.Fatalf("tk_b spent again: %v, %v; want spent", ok, err)
	}

	if ok, err := st.SpendTicket(ctx, "tk_old", time.Now().Add(-6*time.Minute)); err != nil || !ok {
		t.Fatalf("spend tk_old: %v, %v", ok, err)
	}
	if ok, err := st.SpendTicket(ctx, "tk_recent", time.Now().Add(-time.Second)); err != nil || !ok {
		t.Fatalf("spend tk_recent: %v, %v", ok, err)
	}
	if _, err := st.SpendTicket(ctx, "tk_c", exp); err != nil {
		t.Fatal(err)
	}
	// tk_old's row went with that spend: spent again, it is new to the table. (The API never
	// spends an expired ticket; this shows only that old rows do not pile up.)
	if ok, err := st.SpendTicket(ctx, "tk_old", time.Now().Add(-6*time.Minute)); err != nil || !ok {
		t.Fatalf("tk_old's row was kept after it expired: %v, %v", ok, err)
	}
	// One expired only a moment ago is kept: the API's clock may be behind the database's.
	if ok, err := st.SpendTicket(ctx, "tk_recent", time.Now().Add(-time.Second)); err != nil || ok {
		t.Fatalf("tk_recent's row went with the spend right after it expired: %v, %v", ok, err)
	}
	if ok, err := st.SpendTicket(ctx, "tk_b", exp); err != nil || ok {
		t.Fatalf("an unexpired spent ticket was dropped: %v, %v", ok, err)
	}
}
