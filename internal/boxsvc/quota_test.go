package boxsvc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/store"
)

// TestCreateOverQuota is the N+1th box: with the owner's boxes at the quota (rows as their
// workflows wrote them), Create answers resource_exhausted naming the limit and its value, and
// starts nothing; another user is not counted.
func TestCreateOverQuota(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t) // ann owns one box
	ctx := context.Background()
	if _, err := e.st.CreateBox(ctx, store.NewBox{ID: cocoonbox.NewBoxID(), Owner: e.ann, Name: "second", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	// No Temporal client: a create that got past the quota would panic here.
	svc := &boxsvc.Service{Store: e.st, Quota: config.Quota{Boxes: 2}}
	_, err := svc.Create(ctx, e.ann, boxsvc.CreateRequest{Name: "third", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || cocoonbox.ErrorMessage(err) != "quota: boxes per user (2) reached" {
		t.Fatalf("third box: %v", err)
	}
	if boxes, err := e.st.ListBoxes(ctx, e.ann); err != nil || len(boxes) != 2 {
		t.Fatalf("boxes after the refused create: %d, %v; want 2", len(boxes), err)
	}
	svc.Quota = config.Quota{VCPUs: 3} // ann's two boxes: medium (2) + small (1)
	_, err = svc.Create(ctx, e.ann, boxsvc.CreateRequest{Name: "third", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || cocoonbox.ErrorMessage(err) != "quota: vCPUs per user (3) reached: your boxes have 3 vCPUs and a small box needs 1 more" {
		t.Fatalf("third box over vCPUs: %v", err)
	}
}

// TestStartRunOverQuota: with the caller's runs that have not ended at the quota, StartRun
// answers resource_exhausted naming the limit, before any workflow starts.
func TestStartRunOverQuota(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t) // ann has one run, still running
	e.svc.Agent = config.Agent{Provider: "openai", BaseURL: "http://gateway.test/v1", Model: "m"}
	e.svc.Quota = config.Quota{Runs: 1}
	_, err := e.svc.StartRun(context.Background(), e.ann, e.box, boxsvc.RunRequest{Task: "more"})
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || cocoonbox.ErrorMessage(err) != "quota: concurrent agent runs per user (1) reached" {
		t.Fatalf("second run: %v", err)
	}
	if runs, err := e.st.ListAgentRuns(context.Background(), e.box); err != nil || len(runs) != 1 {
		t.Fatalf("runs after the refused start: %d, %v; want 1", len(runs), err)
	}
}

// TestStreamsQuota holds one WatchRun open with a streams quota of 1: a second watch by the
// same user is resource_exhausted naming the limit, another user's is not, and the first
// watch's end frees its place.
func TestStreamsQuota(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	e.svc.Quota = config.Quota{Streams: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, stop := context.WithCancel(ctx)
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var once bool
		done <- e.svc.WatchRun(first, e.ann, e.run, func(boxsvc.RunEvent) error {
			if !once {
				once = true
				close(started)
			}
			return nil
		})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("first watch ended: %v", err)
	}
	errStop := errors.New("stop")
	err := e.svc.WatchRun(ctx, e.ann, e.run, func(boxsvc.RunEvent) error { return errStop })
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || cocoonbox.ErrorMessage(err) != "quota: concurrent streams per user (1) reached" {
		t.Fatalf("second watch: %v", err)
	}
	if err := e.svc.WatchRun(ctx, e.vic, e.run, func(boxsvc.RunEvent) error { return errStop }); !errors.Is(err, errStop) {
		t.Fatalf("another user's watch: %v; want it served", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("first watch: %v", err)
	}
	if err := e.svc.WatchRun(ctx, e.ann, e.run, func(boxsvc.RunEvent) error { return errStop }); !errors.Is(err, errStop) {
		t.Fatalf("watch after the first ended: %v; want it served", err)
	}
}

// TestCreateNamesWhatIsTaken: a create whose ID another user's box holds, or whose name one of
// the caller's own boxes has, is a conflict that says which, and writes no row.
func TestCreateNamesWhatIsTaken(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t) // ann owns e.box, called dev
	ctx := context.Background()
	// No Temporal client: a create that got past the row would panic here.
	svc := &boxsvc.Service{Store: e.st}
	for _, c := range []struct {
		caller string
		req    boxsvc.CreateRequest
		want   string
	}{
		{e.vic, boxsvc.CreateRequest{ID: e.box, Name: "mine", Size: cocoonbox.SizeSmall}, "box ID " + string(e.box) + " is taken"},
		{e.ann, boxsvc.CreateRequest{Name: "dev", Size: cocoonbox.SizeSmall}, `name: you already have a box called "dev"`},
	} {
		_, err := svc.Create(ctx, c.caller, c.req)
		if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || cocoonbox.ErrorMessage(err) != c.want {
			t.Errorf("create %+v as %s: %v; want conflict %q", c.req, c.caller, err, c.want)
		}
	}
	for _, u := range []string{e.ann, e.vic} {
		if boxes, err := e.st.ListBoxes(ctx, u); err != nil || len(boxes) != map[string]int{e.ann: 1, e.vic: 0}[u] {
			t.Errorf("boxes of %s after the refused creates: %d, %v", u, len(boxes), err)
		}
	}
}
