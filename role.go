package cocoonbox

// Role is what a share grants on a box. Roles are ordered: each includes the ones below it.
type Role string

// Share roles, weakest first. The owner holds every right; RoleOwner is never stored in a share.
const (
	RoleViewer Role = "viewer" // read status and snapshots, watch the box and its desktop
	RoleDriver Role = "driver" // also exec, files, desktop control, agent runs, wake, hibernate, snapshot
	RoleAdmin  Role = "admin"  // also restore, share and delete
	RoleOwner  Role = "owner"  // everything; the box is theirs
)

var roleRank = map[Role]int{RoleViewer: 1, RoleDriver: 2, RoleAdmin: 3, RoleOwner: 4}

// Validate reports whether r is a role that may be granted through a share.
func (r Role) Validate() error {
	switch r {
	case RoleViewer, RoleDriver, RoleAdmin:
		return nil
	}
	return Invalid("role", "must be viewer, driver or admin, got "+quote(string(r)))
}

// Allows reports whether r includes the rights of want. An unknown role allows nothing.
func (r Role) Allows(want Role) bool {
	have, ok := roleRank[r]
	return ok && have >= roleRank[want]
}
