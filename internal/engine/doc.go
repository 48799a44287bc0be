// Package engine is the local sandbox engine: an HTTP server speaking the upstream sandboxd API
// (see SANDBOXD.md) so that cocoonbox's sandbox client and conformance suite run unchanged
// against it and against a production sandboxd. It owns what sandboxd owns on a node — claims
// with warm pools, leases and their reaper, hibernate and wake, exec and the ports relay,
// checkpoints, per-sandbox tokens — and delegates running the boxes to a runtime.Runtime
// (gVisor by default, the process runtime as a fallback).
//
// Its records live on disk under Options.Dir, one JSON file per sandbox and per checkpoint, so
// an engine killed at any moment re-adopts its boxes on the next start by asking the runtime
// what it still holds. Operations on one sandbox are serialized by that sandbox's own locks;
// the engine-wide lock guards only maps and is never held across a runtime call.
package engine
