package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// mcpScreenshotWidth is box_screenshot's max_width when none is given: wide enough to read a
// screen's text, small enough for a model's image input.
const mcpScreenshotWidth = 1280

// mcpDesktopTools are the tools on a box's desktop, thin adapters over the box service's desktop
// verbs, which reach the box's resident agent. Input is refused while another person holds the
// desktop's control lease.
func (s *Server) mcpDesktopTools() []mcpTool {
	return []mcpTool{{
		tool: mcp.NewTool("box_screenshot",
			mcp.WithDescription("Capture a box's desktop as a PNG image, downscaled to max_width. The text line gives "+
				"the image's and the screen's sizes: box_click takes screen pixels, so scale a point of a "+
				"downscaled image by screen_width / width."),
			boxArg(),
			mcp.WithInteger("max_width", mcp.Min(0), mcp.DefaultNumber(mcpScreenshotWidth),
				mcp.Description(fmt.Sprintf("Downscale the image to at most this width, keeping the aspect (default %d; 0 is full size).", mcpScreenshotWidth))),
			mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			shot, err := s.boxes.Screenshot(ctx, caller, id, req.GetInt("max_width", mcpScreenshotWidth))
			if err != nil {
				return nil, err
			}
			text := fmt.Sprintf("screenshot of box %s: width %d, height %d (screen_width %d, screen_height %d)",
				id, shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight)
			return mcp.NewToolResultImage(text, base64.StdEncoding.EncodeToString(shot.PNG), "image/png"), nil
		}),
	}, {
		tool: mcp.NewTool("box_click",
			mcp.WithDescription("Move a box's mouse pointer to (x, y) in screen pixels and click. "+
				"Refused while another person holds the desktop's control lease."),
			boxArg(),
			mcp.WithInteger("x", mcp.Required(), mcp.Min(0), mcp.Description("Screen pixels from the left edge.")),
			mcp.WithInteger("y", mcp.Required(), mcp.Min(0), mcp.Description("Screen pixels from the top edge.")),
			mcp.WithString("button", mcp.Enum("left", "middle", "right"), mcp.DefaultString("left"),
				mcp.Description("The mouse button; left when omitted.")),
			mcp.WithBoolean("double", mcp.DefaultBool(false), mcp.Description("Click twice (a double click).")),
			mcp.WithDestructiveHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			x, err := req.RequireInt("x")
			if err != nil {
				return nil, cocoonbox.Invalid("x", "is required: screen pixels from the left edge")
			}
			y, err := req.RequireInt("y")
			if err != nil {
				return nil, cocoonbox.Invalid("y", "is required: screen pixels from the top edge")
			}
			click := boxsvc.ClickRequest{X: x, Y: y, Button: req.GetString("button", ""), Double: req.GetBool("double", false)}
			if err := s.boxes.Click(ctx, caller, id, click); err != nil {
				return nil, err
			}
			return map[string]any{"box": id, "clicked": map[string]any{"x": x, "y": y, "button": cmp.Or(click.Button, "left"), "double": click.Double}}, nil
		}),
	}, {
		tool: mcp.NewTool("box_type",
			mcp.WithDescription("Type text at a box's keyboard focus, as if on its keyboard; newlines press Return. "+
				"Click the target first to focus it. Refused while another person holds the desktop's control lease."),
			boxArg(),
			mcp.WithString("text", mcp.Required(), mcp.MinLength(1), mcp.Description("The text to type.")),
			mcp.WithDestructiveHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			text := req.GetString("text", "")
			if err := s.boxes.Type(ctx, caller, id, text); err != nil {
				return nil, err
			}
			return map[string]any{"box": id, "typed_chars": len([]rune(text))}, nil
		}),
	}, {
		tool: mcp.NewTool("box_key",
			mcp.WithDescription(`Press keys or chords on a box's desktop, in xdotool's key names: "Return", "Escape", `+
				`"ctrl+l", "alt+Tab", "ctrl+shift+t"; several separated by spaces are pressed in turn. `+
				`Refused while another person holds the desktop's control lease.`),
			boxArg(),
			mcp.WithString("keys", mcp.Required(), mcp.MinLength(1),
				mcp.Description(`A key or chord, e.g. "Return" or "ctrl+l"; several separated by spaces ("ctrl+a Delete").`)),
			mcp.WithDestructiveHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			keys := req.GetString("keys", "")
			if err := s.boxes.Key(ctx, caller, id, keys); err != nil {
				return nil, err
			}
			return map[string]any{"box": id, "pressed": keys}, nil
		}),
	}}
}
