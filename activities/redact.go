package activities

import (
	"bytes"
	"io"
)

// redactedKey is what a gateway's answer carries to the box in place of the key.
const redactedKey = "[redacted]"

// minRedacted is the shortest key looked for in answers: a shorter one would match ordinary text.
const minRedacted = 8

// redactor passes a stream to w with every occurrence of secret replaced by redactedKey, so a
// gateway whose answer echoes the key (some error bodies quote the request's headers) does not
// hand it to the box. It holds back only a tail that could be the start of the secret, until the
// next write or Flush, so streamed events still reach the box as they arrive.
type redactor struct {
	w      io.Writer
	secret []byte
	held   []byte
	hits   int // occurrences replaced
}

func newRedactor(w io.Writer, secret string) *redactor {
	if len(secret) < minRedacted {
		secret = ""
	}
	return &redactor{w: w, secret: []byte(secret)}
}

// Write implements io.Writer; it reports len(p) written when w took everything it was given.
func (r *redactor) Write(p []byte) (int, error) {
	if len(r.secret) == 0 {
		return r.w.Write(p)
	}
	buf := append(r.held, p...)
	r.hits += bytes.Count(buf, r.secret)
	buf = bytes.ReplaceAll(buf, r.secret, []byte(redactedKey))
	keep := 0
	for l := min(len(r.secret)-1, len(buf)); l > 0; l-- {
		if bytes.HasSuffix(buf, r.secret[:l]) {
			keep = l
			break
		}
	}
	r.held = append(r.held[:0:0], buf[len(buf)-keep:]...)
	if _, err := r.w.Write(buf[:len(buf)-keep]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what was held back: at the end of the stream it cannot begin the secret.
func (r *redactor) Flush() error {
	if len(r.held) == 0 {
		return nil
	}
	_, err := r.w.Write(r.held)
	r.held = nil
	return err
}
