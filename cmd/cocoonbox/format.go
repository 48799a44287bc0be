package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// The text forms of API results: aligned tables for lists, "key: value" lines for one item.
// Times are UTC RFC 3339 so the text is the same on every machine; "-" marks an empty cell.

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= 1024
		if v < 1024 || unit == "TiB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return ""
}

// writeBoxes is `box ls`.
func writeBoxes(w io.Writer, boxes []*cbv1.Box) error {
	if len(boxes) == 0 {
		_, err := fmt.Fprintln(w, "No boxes. Create one with: cocoonbox box create --name NAME")
		return err
	}
	tw := table(w)
	row(tw, "ID", "NAME", "STATE", "SIZE", "ROLE", "CREATED")
	for _, b := range boxes {
		row(tw, b.GetId(), b.GetName(), boxState(b), b.GetSize(), b.GetRole(), when(b.GetCreatedAt()))
	}
	return tw.Flush()
}

// writeBoxTree is `box ls --tree`: each fork under its parent (forks of a box the list does
// not hold, such as a deleted one, stay at the top, naming it).
func writeBoxTree(w io.Writer, boxes []*cbv1.Box) error {
	if len(boxes) == 0 {
		return writeBoxes(w, boxes)
	}
	listed := map[string]bool{}
	children := map[string][]*cbv1.Box{}
	for _, b := range boxes {
		listed[b.GetId()] = true
	}
	var roots []*cbv1.Box
	for _, b := range boxes {
		if p := b.GetParent(); p != "" && listed[p] {
			children[p] = append(children[p], b)
		} else {
			roots = append(roots, b)
		}
	}
	tw := table(w)
	row(tw, "ID", "NAME", "STATE", "SIZE", "ROLE", "CREATED")
	var walk func(b *cbv1.Box, indent string)
	walk = func(b *cbv1.Box, indent string) {
		name := indent + b.GetName()
		if p := b.GetParent(); p != "" && !listed[p] {
			name += " (fork of " + p + ")"
		}
		row(tw, b.GetId(), name, boxState(b), b.GetSize(), b.GetRole(), when(b.GetCreatedAt()))
		for _, c := range children[b.GetId()] {
			walk(c, strings.Replace(indent, "└─ ", "   ", 1)+"└─ ")
		}
	}
	for _, b := range roots {
		walk(b, "")
	}
	return tw.Flush()
}

// boxState is the state, flagged when the last operation failed.
func boxState(b *cbv1.Box) string {
	if b.GetLastError() != "" && b.GetState() != "failed" {
		return b.GetState() + "!"
	}
	return b.GetState()
}

// writeBox is `box show`.
func writeBox(w io.Writer, b *cbv1.Box) error {
	tw := table(w)
	kv := func(k, v string) { row(tw, k+":", v) }
	kv("id", b.GetId())
	kv("name", b.GetName())
	kv("state", b.GetState())
	if b.GetLastError() != "" {
		kv("last error", b.GetLastError())
	}
	kv("size", b.GetSize())
	if n := b.GetNetwork(); n != "" {
		if allow := b.GetNetworkAllow(); len(allow) > 0 {
			n += " (" + strings.Join(allow, ", ") + ")"
		}
		kv("network", n)
	}
	if p := b.GetPolicy(); p != nil {
		kv("policy", policyLine(p))
	}
	kv("owner", b.GetOwner())
	kv("role", b.GetRole())
	kv("viewers", fmt.Sprint(b.GetViewers()))
	if c := b.GetController(); c != "" {
		kv("controller", c)
	}
	kv("pins", strings.Join(b.GetPins(), ", "))
	kv("idle deadline", when(b.GetIdleDeadline()))
	if w := b.GetWaiting(); w != "" {
		kv("waiting", w)
	}
	kv("last snapshot", b.GetLastSnapshot())
	if seal := b.GetSeal(); seal != "" {
		kv("seal", seal)
	}
	if r := b.GetRestoredFrom(); r != nil {
		kv("restored from", fmt.Sprintf("%s (taken %s; the box was rebuilt from it %s, when its sandbox was lost)",
			r.GetSnapshotId(), when(r.GetTakenAt()), when(r.GetAt())))
	}
	kv("created", when(b.GetCreatedAt()))
	if p := b.GetParent(); p != "" {
		kv("forked from", fmt.Sprintf("%s at %s", p, when(b.GetForkedAt())))
	}
	return tw.Flush()
}

// boxLine is the one-line result of an operation on a box.
func boxLine(w io.Writer, b *cbv1.Box) error {
	_, err := fmt.Fprintf(w, "%s (%s) %s\n", b.GetName(), b.GetId(), b.GetState())
	if err == nil && b.GetController() != "" {
		_, err = fmt.Fprintf(w, "desktop controlled by %s\n", b.GetController())
	}
	if err == nil && b.GetLastError() != "" {
		_, err = fmt.Fprintf(w, "last error: %s\n", b.GetLastError())
	}
	return err
}

// writeSnapshots is `box snapshots`.
func writeSnapshots(w io.Writer, snaps []*cbv1.Snapshot) error {
	if len(snaps) == 0 {
		_, err := fmt.Fprintln(w, "No snapshots.")
		return err
	}
	tw := table(w)
	row(tw, "ID", "STATE", "SIZE", "FILES", "PINNED", "CREATED", "HOLDS")
	for _, s := range snaps {
		pinned := ""
		if s.GetPinned() {
			pinned = "yes"
		}
		row(tw, s.GetId(), s.GetState(), humanBytes(s.GetBytes()), fmt.Sprint(s.GetFiles()), pinned, when(s.GetCreatedAt()), holds(s))
	}
	return tw.Flush()
}

// holds says what a snapshot's object holds: the whole disk, or the changes since its base.
func holds(s *cbv1.Snapshot) string {
	if s.GetBaseId() == "" {
		return "everything"
	}
	return "changes since " + s.GetBaseId()
}

// snapshotLine is the result of `box snapshot`.
func snapshotLine(w io.Writer, s *cbv1.Snapshot) error {
	_, err := fmt.Fprintf(w, "%s %s, %s, %d files, %s (box %s)\n", s.GetId(), s.GetState(), humanBytes(s.GetBytes()),
		s.GetFiles(), holds(s), s.GetBoxId())
	return err
}

// writeShares is `box shares`.
func writeShares(w io.Writer, shares []*cbv1.Share) error {
	if len(shares) == 0 {
		_, err := fmt.Fprintln(w, "Not shared with anyone.")
		return err
	}
	tw := table(w)
	row(tw, "USER", "USER ID", "ROLE", "EXPIRES", "CREATED")
	for _, s := range shares {
		expires := when(s.GetExpiresAt())
		if expires == "" {
			expires = "never"
		}
		row(tw, s.GetUserName(), s.GetUserId(), s.GetRole(), expires, when(s.GetCreatedAt()))
	}
	return tw.Flush()
}

// writeTokens is `token ls`; now decides which tokens have expired.
func writeTokens(w io.Writer, tokens []*cbv1.Token, now time.Time) error {
	if len(tokens) == 0 {
		_, err := fmt.Fprintln(w, "No tokens.")
		return err
	}
	tw := table(w)
	row(tw, "ID", "NAME", "SCOPE", "STATUS", "CREATED", "LAST USED", "EXPIRES")
	for _, t := range tokens {
		expires := when(t.GetExpiresAt())
		if expires == "" {
			expires = "never"
		}
		row(tw, t.GetId(), t.GetName(), tokenScope(t), tokenStatus(t, now), when(t.GetCreatedAt()), when(t.GetLastUsedAt()), expires)
	}
	return tw.Flush()
}

// tokenScope is a token's scope; a server from before scopes sends none, and its tokens are full.
func tokenScope(t *cbv1.Token) string {
	if t.GetScope() == "" {
		return "full"
	}
	return t.GetScope()
}

func tokenStatus(t *cbv1.Token, now time.Time) string {
	switch {
	case t.GetRevokedAt() != nil:
		return "revoked"
	case t.GetExpiresAt() != nil && !t.GetExpiresAt().AsTime().After(now):
		return "expired"
	}
	return "active"
}

// writeSecrets is `vault ls`: names only, values are never read back.
func writeSecrets(w io.Writer, secrets []*cbv1.Secret) error {
	if len(secrets) == 0 {
		_, err := fmt.Fprintln(w, "No secrets.")
		return err
	}
	tw := table(w)
	row(tw, "NAME", "CREATED", "UPDATED")
	for _, s := range secrets {
		row(tw, s.GetName(), when(s.GetCreatedAt()), when(s.GetUpdatedAt()))
	}
	return tw.Flush()
}
