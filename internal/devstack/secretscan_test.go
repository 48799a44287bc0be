package devstack_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The secret scan: every stack a test starts (startDev) is searched, before it closes, for the
// secrets it handled — vault values, sandbox tokens, agent credentials and the like — in every
// Temporal history it holds and every log line it wrote; TestMain searches what the test binary
// printed. A secret found anywhere fails the test, naming its kind and where it was, never its
// value. The rule it holds: secrets reach activities by reference and stay out of workflow
// payloads, errors and logs.

// minSecret is the shortest value the scan looks for: anything shorter would be found by chance
// in any history (a two-letter vault value is in half the words of a log).
const minSecret = 8

// secret is one value a stack handled that must appear in no history and no log.
type secret struct {
	kind  string // "vault value", "sandbox token", ...: what a report names
	value string
}

// needle is one encoding of a secret, as the bytes to look for.
type needle struct {
	kind, encoding string
	b              []byte
}

// hit is a secret found: its kind, how it was encoded and where. It never holds the value.
type hit struct {
	kind, encoding, where string
}

func (h hit) String() string { return fmt.Sprintf("%s (%s) in %s", h.kind, h.encoding, h.where) }

// needlesOf returns the encodings a secret could leak in: raw, hex in both cases, JSON-escaped
// (the JSON log handler, JSON payloads), and base64 (standard and URL alphabet) of the raw and
// escaped forms at each of the three alignments it can take inside a longer encoded value, such
// as a payload's bytes rendered as JSON.
func needlesOf(secrets []secret) []needle {
	var out []needle
	seen := map[string]bool{}
	add := func(kind, enc string, b []byte) {
		if len(b) == 0 || seen[kind+"\x00"+string(b)] {
			return
		}
		seen[kind+"\x00"+string(b)] = true
		out = append(out, needle{kind: kind, encoding: enc, b: b})
	}
	for _, s := range secrets {
		if len(s.value) < minSecret {
			continue
		}
		v := []byte(s.value)
		add(s.kind, "raw", v)
		add(s.kind, "hex", []byte(hex.EncodeToString(v)))
		add(s.kind, "hex", []byte(strings.ToUpper(hex.EncodeToString(v))))
		forms := [][]byte{v}
		for _, html := range []bool{true, false} { // encoding/json escapes <>&; slog's JSON does not
			var q bytes.Buffer
			enc := json.NewEncoder(&q)
			enc.SetEscapeHTML(html)
			if err := enc.Encode(s.value); err == nil {
				b := q.Bytes() // "…"\n
				add(s.kind, "json-escaped", b[1:len(b)-2])
				forms = append(forms, b[1:len(b)-2])
			}
		}
		// base64 of the JSON-escaped forms too: a JSON payload's bytes, shown as JSON.
		for _, f := range forms {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				for shift := range 3 {
					add(s.kind, "base64", base64Core(enc, f, shift))
				}
			}
		}
	}
	return out
}

// base64Core is the part of the base64 encoding of v, preceded by shift other bytes, that
// depends on v alone: the characters whose six bits all come from v. Whatever surrounds v in the
// encoded value, these characters appear as they are.
func base64Core(enc *base64.Encoding, v []byte, shift int) []byte {
	s := enc.EncodeToString(append(make([]byte, shift), v...))
	from := (8*shift + 5) / 6        // the first character that starts at or after v's first bit
	to := (8 * (shift + len(v))) / 6 // one past the last character that ends within v
	return []byte(s[from:to])
}

// scanner looks for needles in the sources it is given and keeps the first hit of each needle
// per source.
type scanner struct {
	needles []needle
	hits    []hit
}

func newScanner(secrets []secret) *scanner { return &scanner{needles: needlesOf(secrets)} }

// scan looks for every needle in data, which came from where.
func (s *scanner) scan(where string, data []byte) {
	for _, n := range s.needles {
		if bytes.Contains(data, n.b) {
			s.hits = append(s.hits, hit{kind: n.kind, encoding: n.encoding, where: where})
		}
	}
}

// scanLines looks for every needle in the text file at path and names the line of each hit.
// A file that does not exist has nothing in it.
func (s *scanner) scanLines(what, path string) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret scan: read %s: %w", what, err)
	}
	for _, n := range s.needles {
		if i := bytes.Index(data, n.b); i >= 0 {
			line := bytes.Count(data[:i], []byte("\n")) + 1
			s.hits = append(s.hits, hit{kind: n.kind, encoding: n.encoding, where: fmt.Sprintf("%s line %d", what, line)})
		}
	}
	return nil
}
