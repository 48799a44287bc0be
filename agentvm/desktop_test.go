package agentvm_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// fakeScreen is a 1280x800 display; xdotool is recorded, not run.
type fakeScreen struct{}

func (fakeScreen) Size(context.Context) (int, int, error) { return 1280, 800, nil }
func (fakeScreen) Capture(context.Context) (image.Image, error) {
	return image.NewRGBA(image.Rect(0, 0, 1280, 800)), nil
}

func (fakeScreen) WindowManager(context.Context) (string, error) { return "Xfwm4", nil }

type xdotool struct {
	mu    sync.Mutex
	calls []string
}

func (x *xdotool) run(_ context.Context, args ...string) ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, strings.Join(args, " "))
	return nil, nil
}

func TestDesktopService(t *testing.T) {
	x := &xdotool{}
	a := startAgent(t, func(c *agentvm.Config) {
		c.Desktop = desktop.New(desktop.Config{Run: x.run, Screen: fakeScreen{}})
	})
	ctx := withCredential(t.Context(), testCredential)
	client := agentvmv1.NewDesktopClient(a.conn)

	shot, err := client.Screenshot(ctx, &agentvmv1.ScreenshotRequest{MaxWidth: 640})
	require.NoError(t, err)
	require.Equal(t, []int32{640, 400, 1280, 800}, []int32{shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight})
	img, err := png.Decode(bytes.NewReader(shot.Png))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 640, 400), img.Bounds())
	shot, err = client.Screenshot(ctx, &agentvmv1.ScreenshotRequest{})
	require.NoError(t, err)
	require.Equal(t, int32(1280), shot.Width)

	_, err = client.Click(ctx, &agentvmv1.ClickRequest{X: 1279, Y: 10, Button: "right", Double: true})
	require.NoError(t, err)
	_, err = client.Move(ctx, &agentvmv1.MoveRequest{X: 5, Y: 6})
	require.NoError(t, err)
	_, err = client.Type(ctx, &agentvmv1.TypeRequest{Text: "hi\n"})
	require.NoError(t, err)
	_, err = client.Key(ctx, &agentvmv1.KeyRequest{Keys: "ctrl+l"})
	require.NoError(t, err)
	_, err = client.Scroll(ctx, &agentvmv1.ScrollRequest{X: 100, Y: 200, Dy: 3})
	require.NoError(t, err)
	require.Equal(t, []string{
		"mousemove 1279 10 click --repeat 2 3",
		"mousemove 5 6",
		"type --delay 12 -- hi\n",
		"key ctrl+l",
		"mousemove 100 200 click --repeat 3 5",
	}, x.calls)

	for field, call := range map[string]func() error{
		"x":         func() error { _, err := client.Click(ctx, &agentvmv1.ClickRequest{X: -1}); return err },
		"y":         func() error { _, err := client.Move(ctx, &agentvmv1.MoveRequest{Y: 800}); return err },
		"button":    func() error { _, err := client.Click(ctx, &agentvmv1.ClickRequest{Button: "back"}); return err },
		"text":      func() error { _, err := client.Type(ctx, &agentvmv1.TypeRequest{}); return err },
		"keys":      func() error { _, err := client.Key(ctx, &agentvmv1.KeyRequest{Keys: "--help"}); return err },
		"dy":        func() error { _, err := client.Scroll(ctx, &agentvmv1.ScrollRequest{}); return err },
		"max_width": func() error { _, err := client.Screenshot(ctx, &agentvmv1.ScreenshotRequest{MaxWidth: -1}); return err },
	} {
		err := call()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", field, err)
		require.True(t, strings.HasPrefix(status.Convert(err).Message(), field+":"), "%s: %v", field, err)
	}
	require.Len(t, x.calls, 5, "invalid calls ran xdotool")

	_, err = agentvmv1.NewDesktopClient(a.conn).Move(t.Context(), &agentvmv1.MoveRequest{X: 1, Y: 1})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	info, err := agentvmv1.NewInfoClient(a.conn).Get(ctx, &agentvmv1.GetInfoRequest{})
	require.NoError(t, err)
	require.Contains(t, info.Capabilities, "desktop")
	require.Contains(t, info.Capabilities, "state")
	require.Equal(t, "Xfwm4", info.WindowManager, "the display's window manager, as the screen names it")
}

func TestDesktopServiceWithoutADesktop(t *testing.T) {
	a := startAgent(t)
	_, err := agentvmv1.NewDesktopClient(a.conn).Move(withCredential(t.Context(), testCredential), &agentvmv1.MoveRequest{X: 1, Y: 1})
	require.Equal(t, codes.Unimplemented, status.Code(err))
}
