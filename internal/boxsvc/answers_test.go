package boxsvc

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// TestParseStat checks the stat parser against answers a hostile box may print: every one that
// is not exactly "<size> <mode>" is invalid, naming what was wrong.
func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		out, want string // want: "" for ok, else a piece of the message
		size      int64
		mode      uint32
	}{
		{out: "12 644\n", size: 12, mode: 0o644},
		{out: "0 4755", size: 0, mode: 0o4755},
		{out: "-1 644\n", want: `size "-1" is not a byte count`},
		{out: "+5 644\n", want: `size "+5" is not a byte count`},
		{out: "99999999999999999999 644\n", want: "out of range"},
		{out: "12 9\n", want: `mode "9" is not octal`},
		{out: "12 77777\n", want: `mode "77777" is not octal`},
		{out: "12\n", want: `want "<size> <mode>"`},
		{out: "12 644 x\n", want: `want "<size> <mode>"`},
		{out: "", want: `want "<size> <mode>"`},
		{out: "12 644\n\n", want: `want "<size> <mode>"`},
	} {
		size, mode, err := parseStat("/f", tc.out)
		switch {
		case tc.want == "" && (err != nil || size != tc.size || mode != tc.mode):
			t.Errorf("parseStat(%q) = %d, %o, %v; want %d, %o", tc.out, size, mode, err, tc.size, tc.mode)
		case tc.want != "" && (cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("parseStat(%q) = %v; want invalid containing %q", tc.out, err, tc.want)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	for _, s := range []string{"12 644\n", "-1 644", "0 7777", "1 2 3", "\x00 \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		size, mode, err := parseStat("/f", out)
		if err != nil {
			if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid {
				t.Fatalf("parseStat(%q): %v is not invalid", out, err)
			}
			checkBoxMessage(t, cocoonbox.ErrorMessage(err))
			return
		}
		if size < 0 || mode > 0o7777 {
			t.Fatalf("parseStat(%q) = %d, %o: out of bounds", out, size, mode)
		}
		if again, m, err := parseStat("/f", fmt.Sprintf("%d %o", size, mode)); err != nil || again != size || m != mode {
			t.Fatalf("parseStat(%q) = %d, %o does not read back: %d, %o, %v", out, size, mode, again, m, err)
		}
	})
}

func FuzzDecodeChunk(f *testing.F) {
	for _, s := range []string{"aGVsbG8=\n", "", "!!!", strings.Repeat("A", 200), "aGVsbG8"} {
		f.Add(s)
	}
	const max = 64
	f.Fuzz(func(t *testing.T, out string) {
		b, err := decodeChunk("/f", out, max)
		if err != nil {
			if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid {
				t.Fatalf("decodeChunk(%q): %v is not invalid", out, err)
			}
			checkBoxMessage(t, cocoonbox.ErrorMessage(err))
			return
		}
		if len(b) > max {
			t.Fatalf("decodeChunk(%q) = %d bytes, over %d", out, len(b), max)
		}
		// The decoder skips line breaks anywhere, as base64 allows.
		if base64.StdEncoding.EncodeToString(b) != strings.NewReplacer("\n", "", "\r", "").Replace(out) {
			t.Fatalf("decodeChunk(%q) = %q does not encode back", out, b)
		}
	})
}

// testPNG is a w×h PNG.
func testPNG(w, h int) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// TestParseScreenshot checks the screenshot answer's bounds: sizes a caller divides by, or maps
// points with, must be positive and agree with the PNG.
func TestParseScreenshot(t *testing.T) {
	good := testPNG(4, 3)
	for _, tc := range []struct {
		png                []byte
		w, h, sw, sh, maxW int32
		want               string
	}{
		{png: good, w: 4, h: 3, sw: 8, sh: 6},
		{png: good, w: 4, h: 3, sw: 8, sh: 6, maxW: 4},
		{png: good, w: 4, h: 3, sw: 0, sh: 6, want: "screen size 0x6"},
		{png: good, w: 4, h: 3, sw: -8, sh: 6, want: "screen size -8x6"},
		{png: good, w: 0, h: 3, sw: 8, sh: 6, want: "image size 0x3"},
		{png: good, w: 4, h: 3, sw: 2, sh: 6, want: "larger than the screen"},
		{png: good, w: 4, h: 3, sw: 8, sh: 6, maxW: 2, want: "2 were asked for"},
		{png: good, w: 5, h: 3, sw: 8, sh: 6, want: "the PNG is 4x3, the answer says 5x3"},
		{png: []byte("GIF89a"), w: 4, h: 3, sw: 8, sh: 6, want: "not a PNG"},
		{png: nil, w: 4, h: 3, sw: 8, sh: 6, want: "not a PNG"},
	} {
		resp := &agentvmv1.ScreenshotResponse{Png: tc.png, Width: tc.w, Height: tc.h, ScreenWidth: tc.sw, ScreenHeight: tc.sh}
		shot, err := parseScreenshot(resp, int(tc.maxW))
		switch {
		case tc.want == "" && (err != nil || shot.Width != int(tc.w) || !bytes.Equal(shot.PNG, tc.png)):
			t.Errorf("parseScreenshot(%dx%d of %dx%d) = %+v, %v", tc.w, tc.h, tc.sw, tc.sh, shot, err)
		case tc.want != "" && (cocoonbox.ErrorCode(err) != cocoonbox.EInvalid || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("parseScreenshot(%dx%d of %dx%d) = %v; want invalid containing %q", tc.w, tc.h, tc.sw, tc.sh, err, tc.want)
		}
	}
}

func FuzzParseScreenshot(f *testing.F) {
	f.Add(testPNG(4, 3), int32(4), int32(3), int32(8), int32(6), 0)
	f.Add(testPNG(1, 1), int32(1), int32(1), int32(1), int32(1), 1)
	f.Add([]byte("\x89PNG\r\n\x1a\n"), int32(-1), int32(1<<30), int32(0), int32(6), -5)
	f.Fuzz(func(t *testing.T, data []byte, w, h, sw, sh int32, maxW int) {
		resp := &agentvmv1.ScreenshotResponse{Png: data, Width: w, Height: h, ScreenWidth: sw, ScreenHeight: sh}
		shot, err := parseScreenshot(resp, maxW)
		if err != nil {
			if cocoonbox.ErrorCode(err) != cocoonbox.EInvalid {
				t.Fatalf("%v is not invalid", err)
			}
			checkBoxMessage(t, cocoonbox.ErrorMessage(err))
			return
		}
		if shot.Width < 1 || shot.Height < 1 || shot.Width > shot.ScreenWidth || shot.Height > shot.ScreenHeight ||
			shot.ScreenWidth > maxScreenSide || shot.ScreenHeight > maxScreenSide || maxW > 0 && shot.Width > maxW {
			t.Fatalf("accepted out of bounds: %dx%d of %dx%d (max width %d)", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight, maxW)
		}
	})
}

// FuzzBoxMessages feeds a box's words to the paths that quote them to a caller: a failed file
// command's stderr and the box agent's error status.
func FuzzBoxMessages(f *testing.F) {
	for _, s := range []string{"sh: 1: cannot open /f: No such file\n", "", "\x1b[31mred\x07", strings.Repeat("é", 500), "a\nb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		checkBoxMessage(t, boxText(text))
		err := fileError("/f", sandbox.ExecResult{ExitCode: 1, Stderr: text})
		if code := cocoonbox.ErrorCode(err); code != cocoonbox.EInvalid && code != cocoonbox.ENotFound {
			t.Fatalf("fileError(%q) = %v", text, err)
		}
		checkBoxMessage(t, strings.TrimPrefix(cocoonbox.ErrorMessage(err), `path: "/f": `))
	})
}

// checkBoxMessage fails unless msg is fit to show: valid UTF-8, no control characters, bounded.
func checkBoxMessage(t *testing.T, msg string) {
	t.Helper()
	if !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) || len(msg) > 4*200 {
		t.Fatalf("message not fit to show (%d bytes): %q", len(msg), msg)
	}
}
