package cocoonbox

// Role is what a share grants on a box. Roles are ordered: each includes the ones below it.
type Role string

// Share roles, weakest first. The owner holds every right; RoleOwner is never stored in a share.
const (
	RoleViewer Role = "viewer" // watch the desktop, read status
	RoleDriver Role = "driver" // also control the desktop, exec, files, agent runs
	RoleAdmin  Role = "admin"  // also hibernate, snapshot, restore, share
	RoleOwner  Role = "owner"  // also delete
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
