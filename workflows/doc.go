// Package workflows holds cocoonbox's deterministic Temporal workflows: the box entity workflow
// (claim, wake, hibernate, delete), snapshots and agent runs. Every state change of a box goes
// through here so that it survives worker and engine restarts and shows up in the Temporal UI.
// Only deterministic code lives in this package; side effects are activities.
package workflows
