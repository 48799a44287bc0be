package api

import (
	"context"
	"encoding/json"

	"github.com/loomhand/cocoonbox/internal/store"
)

// audit records a change a caller made to their account or vault (box changes are recorded by
// boxsvc). Details name what changed, never a secret or a value. A failure is logged, not
// returned: the change itself already happened.
func (s *Server) audit(ctx context.Context, actor, action string, detail map[string]any) {
	d, err := json.Marshal(detail)
	if err != nil {
		d = []byte("{}")
	}
	if err := s.store.AppendEvent(ctx, store.Event{Actor: actor, Action: action, Detail: d}); err != nil {
		s.log.Warn("audit event", "action", action, "err", err)
	}
}
