package sandboxtest

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Checkpoints here copy the box's disk; claims from them start fresh processes on that disk
// (Info says checkpoint_memory is false).

func (f *Fake) checkpoint(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	var req sandbox.CheckpointRequest
	if !decode(w, r, &req, false, false) {
		return
	}
	f.mu.Lock()
	s := f.sandboxes[r.PathValue("id")]
	f.mu.Unlock()
	// The body token proves ownership; the root token may act by id with an empty one.
	if s == nil || req.Token != s.token && !(c.root && req.Token == "") {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	if s.key.Net == sandbox.NetEgress {
		writeError(w, http.StatusConflict, "a sandbox on the egress lane cannot be checkpointed")
		return
	}
	ck := &checkpoint{rec: sandbox.Checkpoint{ID: "ck_" + randomHex(8), Name: req.Name, SandboxID: s.id,
		Key: s.key, Tenant: c.tenant, CreatedAt: time.Now().UTC()}}
	ck.dir = filepath.Join(f.dir, ck.rec.ID)
	if err := copyDisk(s.box.dir, ck.dir); err != nil {
		writeError(w, http.StatusInternalServerError, "checkpoint failed: "+err.Error())
		return
	}
	f.mu.Lock()
	f.checkpoints[ck.rec.ID] = ck
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, sandbox.CheckpointResponse{Checkpoint: ck.rec})
}

func (f *Fake) claimCheckpoint(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	var req sandbox.CheckpointClaimRequest
	if !decode(w, r, &req, false, true) {
		return
	}
	ttl, msg := lease(req.TTLSeconds)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	f.mu.Lock()
	ck := f.checkpoints[r.PathValue("id")]
	f.mu.Unlock()
	if ck == nil { // the unguessable id is the capability, whoever created it
		writeError(w, http.StatusNotFound, "checkpoint not found")
		return
	}
	s, err := f.create(ck.rec.Key, ttl, c.tenant, req.ClaimRef, ck.dir, ck.rec.ID)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "provisioning failed: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, sandbox.ClaimResponse{ID: s.id, Token: s.token, Deadline: s.deadline,
		OwnerAddr: f.addr, FromCheckpoint: ck.rec.ID})
}

func (f *Fake) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	out := sandbox.CheckpointList{Checkpoints: []sandbox.Checkpoint{}}
	f.mu.Lock()
	for _, ck := range f.checkpoints {
		if c.visible(ck.rec.Tenant) {
			out.Checkpoints = append(out.Checkpoints, ck.rec)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(out.Checkpoints, func(a, b sandbox.Checkpoint) int { return b.CreatedAt.Compare(a.CreatedAt) })
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) deleteCheckpoint(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	f.mu.Lock()
	ck := f.checkpoints[r.PathValue("id")]
	if ck != nil && c.visible(ck.rec.Tenant) {
		delete(f.checkpoints, ck.rec.ID)
	} else {
		ck = nil // another tenant's is as good as absent
	}
	f.mu.Unlock()
	if ck == nil {
		writeError(w, http.StatusNotFound, "checkpoint not found")
		return
	}
	_ = os.RemoveAll(ck.dir)
	w.WriteHeader(http.StatusNoContent)
}
