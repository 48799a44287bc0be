package boxsvc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// desktopCallTimeout bounds one call to the box's agent for a screenshot or an input.
const desktopCallTimeout = time.Minute

// Screenshot is a capture of a box's screen.
type Screenshot struct {
	PNG           []byte
	Width, Height int // the image's
	// ScreenWidth and ScreenHeight are the screen's, for mapping a point of the image back to the
	// screen, where Click takes it.
	ScreenWidth, ScreenHeight int
}

// ClickRequest is a click on the box's screen, in screen pixels.
type ClickRequest struct {
	X, Y   int
	Button string // left (""), middle or right
	Double bool
}

// Screenshot captures the box's screen through its agent (viewer), downscaled to maxWidth when
// that is smaller (0: full size). A hibernated box is woken through its workflow first.
func (s *Service) Screenshot(ctx context.Context, caller string, id cocoonbox.BoxID, maxWidth int) (Screenshot, error) {
	if maxWidth < 0 {
		return Screenshot{}, cocoonbox.Invalid("max_width", fmt.Sprintf("must be 0 (full size) or more, got %d", maxWidth))
	}
	if maxWidth > 1<<15 {
		maxWidth = 0 // wider than any screen: full size
	}
	var out Screenshot
	err := s.onDesktop(ctx, caller, id, cocoonbox.RoleViewer, func(ctx context.Context, c agentvmv1.DesktopClient) error {
		resp, err := c.Screenshot(ctx, &agentvmv1.ScreenshotRequest{MaxWidth: int32(maxWidth)})
		if err != nil {
			return err
		}
		out, err = parseScreenshot(resp, maxWidth)
		return err
	})
	return out, err
}

// Click moves the box's pointer to (x, y) and clicks (driver, and not while another person holds
// the desktop's control lease).
func (s *Service) Click(ctx context.Context, caller string, id cocoonbox.BoxID, req ClickRequest) error {
	switch req.Button {
	case "", "left", "middle", "right":
	default:
		return cocoonbox.Invalid("button", fmt.Sprintf("must be left, middle or right, got %q", req.Button))
	}
	if req.X < 0 || req.Y < 0 {
		return cocoonbox.Invalid("x", fmt.Sprintf("x and y must be screen pixels from 0, got (%d, %d)", req.X, req.Y))
	}
	err := s.onDesktop(ctx, caller, id, cocoonbox.RoleDriver, func(ctx context.Context, c agentvmv1.DesktopClient) error {
		_, err := c.Click(ctx, &agentvmv1.ClickRequest{X: int32(req.X), Y: int32(req.Y), Button: req.Button, Double: req.Double})
		return err
	})
	if err == nil {
		s.audit(ctx, caller, id, "desktop.click", map[string]any{"x": req.X, "y": req.Y, "button": req.Button, "double": req.Double})
	}
	return err
}

// Type types text at the box's keyboard focus (driver, as Click). The audit event records its
// length, not the text, which may be a password.
func (s *Service) Type(ctx context.Context, caller string, id cocoonbox.BoxID, text string) error {
	if text == "" {
		return cocoonbox.Invalid("text", "is required: the text to type")
	}
	err := s.onDesktop(ctx, caller, id, cocoonbox.RoleDriver, func(ctx context.Context, c agentvmv1.DesktopClient) error {
		_, err := c.Type(ctx, &agentvmv1.TypeRequest{Text: text})
		return err
	})
	if err == nil {
		s.audit(ctx, caller, id, "desktop.type", map[string]any{"chars": len([]rune(text))})
	}
	return err
}

// Key presses a key or chord on the box's desktop, in xdotool's names ("Return", "ctrl+l"),
// or several separated by spaces in turn (driver, as Click).
func (s *Service) Key(ctx context.Context, caller string, id cocoonbox.BoxID, keys string) error {
	if keys == "" {
		return cocoonbox.Invalid("keys", `is required: a key or chord such as "Return" or "ctrl+l"`)
	}
	err := s.onDesktop(ctx, caller, id, cocoonbox.RoleDriver, func(ctx context.Context, c agentvmv1.DesktopClient) error {
		_, err := c.Key(ctx, &agentvmv1.KeyRequest{Keys: keys})
		return err
	})
	if err == nil {
		// The count only: a sequence of single keys may spell a password, like typed text.
		s.audit(ctx, caller, id, "desktop.key", map[string]any{"chords": len(strings.Fields(keys))})
	}
	return err
}

// onDesktop checks need (and, for input, the control lease), wakes the box through its workflow
// when it sleeps, and makes call on the box's agent with the box's credential, which the
// workflow's activities wrote when the sandbox became the box's.
func (s *Service) onDesktop(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role, call func(context.Context, agentvmv1.DesktopClient) error) error {
	if s.Link == nil || s.Link.Credentials == nil {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "boxes' desktops cannot be reached from this server", Err: errUnavailable}
	}
	var check func(workflows.Status) error
	if need != cocoonbox.RoleViewer {
		check = func(st workflows.Status) error {
			if st.Controller != "" && st.Controller != caller {
				return cocoonbox.Errorf(cocoonbox.EConflict, "box %s: %s holds the desktop's control lease; wait until they hand it back, or take over",
					id, s.userName(ctx, st.Controller))
			}
			return nil
		}
	}
	ref, err := s.reach(ctx, caller, id, need, check)
	if err != nil {
		return err
	}
	box, err := s.Link.At(id, ref)
	if err != nil {
		return err
	}
	defer s.touch(ctx, id)
	ctx, cancel := context.WithTimeout(ctx, desktopCallTimeout)
	defer cancel()
	return s.Link.Desktop(ctx, box, call)
}

// userName names a user for a message: the name with the ID, or the ID alone when the name
// cannot be read.
func (s *Service) userName(ctx context.Context, userID string) string {
	if u, err := s.Store.UserByID(ctx, userID); err == nil && u.Name != "" {
		return fmt.Sprintf("%s (%s)", u.Name, userID)
	}
	return userID
}
