package boxsvc

import (
	"context"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestViewerDoesNotWake checks awake's rule for every sleeping state: a viewer is refused with
// the reason before anything reaches the box's workflow (the service here has no Temporal
// client, so a wake would panic). The end-to-end check is devstack's TestViewerCannotWake.
func TestViewerDoesNotWake(t *testing.T) {
	s := &Service{}
	id := cocoonbox.NewBoxID()
	for _, state := range []cocoonbox.BoxState{cocoonbox.BoxStateHibernated, cocoonbox.BoxStateHibernating, cocoonbox.BoxStateWaking, cocoonbox.BoxStateFailed} {
		_, err := s.awake(context.Background(), "us_test", id, workflows.Status{BoxID: id, State: state}, cocoonbox.RoleViewer)
		want := "box " + string(id) + " is " + string(state) + "; a driver can wake it"
		if cocoonbox.ErrorCode(err) != cocoonbox.EConflict || cocoonbox.ErrorMessage(err) != want {
			t.Errorf("viewer on a %s box: %v; want conflict %q", state, err, want)
		}
	}
}
