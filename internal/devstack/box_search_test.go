package devstack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestBoxWorkflowsFilterBySearchAttributes: operators find a user's boxes in the Temporal UI by
// Owner (the user ID), OwnerName (the name they know users by) and BoxState; the UI's list is
// this visibility query.
func TestBoxWorkflowsFilterBySearchAttributes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	awake, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "awake", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatal(err)
	}
	asleep, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "asleep", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, asleep.BoxID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range []cocoonbox.BoxID{awake.BoxID, asleep.BoxID} {
			_, _ = d.Boxes.Delete(context.Background(), owner.ID, id)
		}
	})

	cases := []struct {
		query string
		want  []string
	}{
		{fmt.Sprintf("Owner = %q AND BoxState = %q", owner.ID, cocoonbox.BoxStateRunning), []string{workflows.BoxWorkflowID(awake.BoxID)}},
		{fmt.Sprintf("Owner = %q AND BoxState = %q", owner.ID, cocoonbox.BoxStateHibernated), []string{workflows.BoxWorkflowID(asleep.BoxID)}},
		{fmt.Sprintf("BoxName = %q", "asleep"), []string{workflows.BoxWorkflowID(asleep.BoxID)}},
		{fmt.Sprintf("OwnerName = %q AND BoxState = %q", owner.Name, cocoonbox.BoxStateHibernated), []string{workflows.BoxWorkflowID(asleep.BoxID)}},
		{`Owner = "usr_nobody"`, nil},
	}
	for _, tc := range cases {
		// Visibility is eventually consistent: poll until the upserted attributes are indexed.
		err := testutil.Poll(ctx, 30*time.Second, func() error {
			resp, err := d.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: tc.query})
			if err != nil {
				return err
			}
			var got []string
			for _, e := range resp.GetExecutions() {
				got = append(got, e.GetExecution().GetWorkflowId())
			}
			if !slices.Equal(got, tc.want) {
				return fmt.Errorf("got %v, want %v", got, tc.want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
	}
}
