package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestRunTextReachesListeners: text published for a run reaches a listener in order, a long
// text in pieces that join back to it, cut between characters.
func TestRunTextReachesListeners(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan store.RunText, 16)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- st.ListenRunText(ctx, func() { close(ready) }, func(t store.RunText) { got <- t }) }()
	<-ready
	long := strings.Repeat("é", 5000) // 10000 bytes: two pieces
	for _, text := range []string{"Hel", "lo ", long} {
		if err := st.NotifyRunText(ctx, store.RunText{Run: "run_1", Step: 2, Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	var all strings.Builder
	for all.Len() < len("Hello ")+len(long) {
		select {
		case p := <-got:
			if p.Run != "run_1" || p.Step != 2 || len(p.Text) > 6000 {
				t.Fatalf("piece %+v", p)
			}
			all.WriteString(p.Text)
		case <-ctx.Done():
			t.Fatalf("only %q arrived", all.String())
		}
	}
	if all.String() != "Hello "+long {
		t.Fatalf("the pieces joined: %d bytes, want %d in order", all.Len(), len("Hello ")+len(long))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a listener ended by its context: %v", err)
	}
}
