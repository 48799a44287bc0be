package boxsvc

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image/png"
	"strconv"
	"strings"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// The parsers here read what a box returns. Anything in a box (a process, a replaced binary, a
// modified agent) can print whatever it likes, so each answer is read with bounds: a malformed
// one is an invalid error saying what was wrong, never a panic, and never an allocation whose
// size the box chose.

// maxScreenSide bounds a screen or screenshot side, in pixels: wider than any real display.
const maxScreenSide = 1 << 15

// badAnswer is the error for a box answer that is not what was asked for.
func badAnswer(what, format string, args ...any) *cocoonbox.Error {
	return cocoonbox.Errorf(cocoonbox.EInvalid, "box answer: %s: %s", what, fmt.Sprintf(format, args...))
}

// boxText makes text from a box fit for a message (see boxlink.Text).
func boxText(s string) string { return boxlink.Text(s) }

// quoteBox quotes text from a box for a message, bounded as boxText.
func quoteBox(s string) string { return strconv.Quote(boxText(s)) }

// parseStat reads the answer of `stat -c '%s %a'` for path p: a size in bytes (decimal digits
// only, so "-1" and "+5" are refused) and permission bits (octal, at most 07777), separated by
// one space, with at most a trailing newline.
func parseStat(p, out string) (size int64, mode uint32, err error) {
	what := "stat of " + p
	line := strings.TrimSuffix(out, "\n")
	sizeText, modeText, ok := strings.Cut(line, " ")
	if !ok || strings.ContainsAny(modeText, " \n") {
		return 0, 0, badAnswer(what, "want \"<size> <mode>\", got %s", quoteBox(out))
	}
	if !allDigits(sizeText, "0123456789") {
		return 0, 0, badAnswer(what, "size %s is not a byte count", quoteBox(sizeText))
	}
	size, err = strconv.ParseInt(sizeText, 10, 64)
	if err != nil {
		return 0, 0, badAnswer(what, "size %s is out of range", quoteBox(sizeText))
	}
	if !allDigits(modeText, "01234567") || len(modeText) > 4 {
		return 0, 0, badAnswer(what, "mode %s is not octal permission bits", quoteBox(modeText))
	}
	m, _ := strconv.ParseUint(modeText, 8, 32) // at most 4 octal digits: cannot fail
	return size, uint32(m), nil
}

// allDigits reports whether s is not empty and made of digits only.
func allDigits(s, digits string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(digits, s[i]) < 0 {
			return false
		}
	}
	return true
}

// decodeChunk reads one base64 chunk of a file read (`base64 -w0`), which must hold at most max
// bytes: a longer answer is refused before it is decoded.
func decodeChunk(p, out string, max int) ([]byte, error) {
	what := "read of " + p
	enc := strings.TrimSuffix(out, "\n")
	if len(enc) > base64.StdEncoding.EncodedLen(max) {
		return nil, badAnswer(what, "a chunk of %d base64 bytes is over the %d bytes asked for", len(enc), max)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(enc) // strict: one encoding per content
	if err != nil {
		return nil, badAnswer(what, "not base64: %v", err)
	}
	if len(b) > max { // a full last quantum decodes to up to 2 bytes more than EncodedLen allows
		return nil, badAnswer(what, "a chunk of %d bytes is over the %d bytes asked for", len(b), max)
	}
	return b, nil
}

// parseScreenshot checks the box agent's screenshot answer: a PNG whose header says the size the
// answer claims, no larger than the screen it claims (nor than maxWidth when that is set), with
// both within maxScreenSide. Callers map points of the image to the screen by these figures,
// so they must be positive.
func parseScreenshot(resp *agentvmv1.ScreenshotResponse, maxWidth int) (Screenshot, error) {
	const what = "screenshot"
	shot := Screenshot{PNG: resp.GetPng(), Width: int(resp.GetWidth()), Height: int(resp.GetHeight()),
		ScreenWidth: int(resp.GetScreenWidth()), ScreenHeight: int(resp.GetScreenHeight())}
	side := func(n int) bool { return n >= 1 && n <= maxScreenSide }
	switch {
	case !side(shot.ScreenWidth) || !side(shot.ScreenHeight):
		return Screenshot{}, badAnswer(what, "screen size %dx%d is not 1 to %d pixels a side", shot.ScreenWidth, shot.ScreenHeight, maxScreenSide)
	case !side(shot.Width) || !side(shot.Height):
		return Screenshot{}, badAnswer(what, "image size %dx%d is not 1 to %d pixels a side", shot.Width, shot.Height, maxScreenSide)
	case shot.Width > shot.ScreenWidth || shot.Height > shot.ScreenHeight:
		return Screenshot{}, badAnswer(what, "image %dx%d is larger than the screen %dx%d", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight)
	case maxWidth > 0 && shot.Width > maxWidth:
		return Screenshot{}, badAnswer(what, "image is %d pixels wide; %d were asked for", shot.Width, maxWidth)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(shot.PNG))
	if err != nil {
		return Screenshot{}, badAnswer(what, "not a PNG: %s", boxText(err.Error()))
	}
	if cfg.Width != shot.Width || cfg.Height != shot.Height {
		return Screenshot{}, badAnswer(what, "the PNG is %dx%d, the answer says %dx%d", cfg.Width, cfg.Height, shot.Width, shot.Height)
	}
	return shot, nil
}
