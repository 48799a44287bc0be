package desktop

import (
	"context"
	"errors"
	"fmt"
	"image"
	"math/bits"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// pixelFormat describes a ZPixmap image as the X server sends it: how pixels are packed into
// scanlines and which bits of a pixel hold red, green and blue.
type pixelFormat struct {
	BitsPerPixel int
	ScanlinePad  int  // bits each scanline is padded to
	MSBFirst     bool // the server's image byte order
	RedMask      uint32
	GreenMask    uint32
	BlueMask     uint32
}

// zpixmapToImage unpacks a ZPixmap (GetImage's format) of w×h pixels into an RGBA image. TrueColor
// visuals of 15 to 32 bits per pixel are supported: what Xvnc and Xvfb serve.
func zpixmapToImage(data []byte, w, h int, f pixelFormat) (*image.RGBA, error) {
	switch f.BitsPerPixel {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("unsupported %d bits per pixel", f.BitsPerPixel)
	}
	if f.RedMask == 0 || f.GreenMask == 0 || f.BlueMask == 0 {
		return nil, errors.New("not a TrueColor visual: a colour mask is zero")
	}
	pad := f.ScanlinePad
	if pad <= 0 {
		pad = 32
	}
	stride := (w*f.BitsPerPixel + pad - 1) / pad * pad / 8
	if len(data) < stride*h {
		return nil, fmt.Errorf("image data is %d bytes, want %d for %dx%d", len(data), stride*h, w, h)
	}
	bpp := f.BitsPerPixel / 8
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r, g, b := newChannel(f.RedMask), newChannel(f.GreenMask), newChannel(f.BlueMask)
	for y := range h {
		row := data[y*stride:]
		for x := range w {
			p := row[x*bpp : x*bpp+bpp]
			var v uint32
			for i := range bpp {
				if f.MSBFirst {
					v = v<<8 | uint32(p[i])
				} else {
					v |= uint32(p[i]) << (8 * i)
				}
			}
			o := img.PixOffset(x, y)
			img.Pix[o+0], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = r.get(v), g.get(v), b.get(v), 0xff
		}
	}
	return img, nil
}

// channel extracts one colour from a pixel value through its mask, scaled to 8 bits.
type channel struct {
	mask  uint32
	shift int
	width int
}

func newChannel(mask uint32) channel {
	return channel{mask: mask, shift: bits.TrailingZeros32(mask), width: bits.OnesCount32(mask)}
}

func (c channel) get(v uint32) uint8 {
	x := (v & c.mask) >> c.shift
	switch {
	case c.width == 8:
		return uint8(x)
	case c.width > 8:
		return uint8(x >> (c.width - 8))
	default: // widen by repeating the high bits, so full intensity stays 0xff
		return uint8(x * 255 / (1<<c.width - 1))
	}
}

// xScreen reads the root window of an X display over the X protocol (xgb, pure Go: no xwd or
// ImageMagick needed in the image).
type xScreen struct{ display string }

func (s xScreen) dial(ctx context.Context) (*xgb.Conn, error) {
	type dialed struct {
		c   *xgb.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := xgb.NewConnDisplay(s.display)
		ch <- dialed{c, err}
	}()
	select {
	case d := <-ch:
		if d.err != nil {
			return nil, fmt.Errorf("connect to display %s: %w", s.display, d.err)
		}
		return d.c, nil
	case <-ctx.Done():
		go func() {
			if d := <-ch; d.c != nil {
				d.c.Close()
			}
		}()
		return nil, fmt.Errorf("connect to display %s: %w", s.display, ctx.Err())
	}
}

// open dials the display for one request under ctx: done closes the connection, which ctx's
// end closes first (a Reply waiting past the deadline is unblocked).
func (s xScreen) open(ctx context.Context) (c *xgb.Conn, done func(), err error) {
	if c, err = s.dial(ctx); err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, c.Close)
	return c, func() {
		if stop() {
			c.Close()
		}
	}, nil
}

// Size is the root window's size in pixels.
func (s xScreen) Size(ctx context.Context) (int, int, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	root := xproto.Setup(c).DefaultScreen(c)
	return int(root.WidthInPixels), int(root.HeightInPixels), nil
}

// Capture grabs the whole root window.
func (s xScreen) Capture(ctx context.Context) (image.Image, error) {
	c, done, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	setup := xproto.Setup(c)
	root := setup.DefaultScreen(c)
	f := pixelFormat{MSBFirst: setup.ImageByteOrder == xproto.ImageOrderMSBFirst}
	for _, pf := range setup.PixmapFormats {
		if pf.Depth == root.RootDepth {
			f.BitsPerPixel, f.ScanlinePad = int(pf.BitsPerPixel), int(pf.ScanlinePad)
		}
	}
	for _, d := range root.AllowedDepths {
		for _, v := range d.Visuals {
			if v.VisualId == root.RootVisual {
				f.RedMask, f.GreenMask, f.BlueMask = v.RedMask, v.GreenMask, v.BlueMask
			}
		}
	}
	w, h := int(root.WidthInPixels), int(root.HeightInPixels)
	reply, err := xproto.GetImage(c, xproto.ImageFormatZPixmap, xproto.Drawable(root.Root),
		0, 0, uint16(w), uint16(h), 0xffffffff).Reply()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("get root window image: %w", ctx.Err())
		}
		return nil, fmt.Errorf("get root window image: %w", err)
	}
	return zpixmapToImage(reply.Data, w, h, f)
}

// WindowManager names the window manager managing the display, as EWMH announces it: the root
// window's _NET_SUPPORTING_WM_CHECK names a child window that names itself the same way and
// carries the manager's _NET_WM_NAME. It is "" while no manager has announced itself, as while
// a desktop session starts (a window mapped then stays invisible until one does).
func (s xScreen) WindowManager(ctx context.Context) (string, error) {
	c, done, err := s.open(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	atom := func(name string) (xproto.Atom, error) {
		r, err := xproto.InternAtom(c, false, uint16(len(name)), name).Reply()
		if err != nil {
			return 0, fmt.Errorf("intern atom %s: %w", name, err)
		}
		return r.Atom, nil
	}
	check, err := atom("_NET_SUPPORTING_WM_CHECK")
	if err != nil {
		return "", err
	}
	// checkWindow reads w's _NET_SUPPORTING_WM_CHECK: the window it names, or 0.
	checkWindow := func(w xproto.Window) (xproto.Window, error) {
		r, err := xproto.GetProperty(c, false, w, check, xproto.AtomWindow, 0, 1).Reply()
		if err != nil {
			return 0, fmt.Errorf("get _NET_SUPPORTING_WM_CHECK: %w", err)
		}
		if r.Format != 32 || len(r.Value) < 4 {
			return 0, nil
		}
		return xproto.Window(xgb.Get32(r.Value)), nil
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	w, err := checkWindow(root)
	if err != nil || w == 0 {
		return "", err
	}
	// A manager that died leaves the root's property behind, naming a window that is gone
	// (BadWindow) or no longer names itself: no manager, not a failure.
	if self, err := checkWindow(w); err != nil || self != w {
		return "", nil
	}
	name, err := atom("_NET_WM_NAME")
	if err != nil {
		return "", err
	}
	r, err := xproto.GetProperty(c, false, w, name, xproto.GetPropertyTypeAny, 0, 64).Reply()
	if err != nil {
		return "", fmt.Errorf("get _NET_WM_NAME: %w", err)
	}
	if len(r.Value) == 0 {
		return "unnamed", nil // managing, but nameless: still a manager
	}
	return string(r.Value), nil
}
