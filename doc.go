// Package cocoonbox holds the domain vocabulary shared by every part of the system: boxes, their
// states and sizes, snapshots, agent runs, share roles and the error codes every boundary
// translates from. It imports nothing of Temporal, PostgreSQL or gRPC so that workflows, storage
// and the API can all speak it without depending on each other.
package cocoonbox
