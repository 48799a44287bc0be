package tools

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"math"
)

// Fit is how large an image a model is sent: the limits its provider documents for the images
// it takes. A provider scales a larger image down itself, and the model then gives coordinates
// in pixels of an image the agent never saw; an image sent within the limits is what the model
// sees, so its coordinates map back to the screen exactly. A zero field sets no limit, and the
// zero Fit keeps every image as it is.
type Fit struct {
	MaxWidth     int // the widest image
	MaxLongEdge  int // the longer side
	MaxShortEdge int // the shorter side
	MaxPixels    int // width × height
}

// Size is the size a w×h image is scaled to: the largest of its aspect (each side rounded
// down) that meets every limit, never larger than w×h, at least 1×1.
func (f Fit) Size(w, h int) (int, int) {
	if w <= 0 || h <= 0 {
		return w, h
	}
	s := 1.0
	shrink := func(limit, side int) {
		if limit > 0 && side > limit {
			s = min(s, float64(limit)/float64(side))
		}
	}
	shrink(f.MaxWidth, w)
	shrink(f.MaxLongEdge, max(w, h))
	shrink(f.MaxShortEdge, min(w, h))
	if f.MaxPixels > 0 && w*h > f.MaxPixels {
		s = min(s, math.Sqrt(float64(f.MaxPixels)/float64(w*h)))
	}
	if s >= 1 {
		return w, h
	}
	// The small epsilon keeps an exact ratio (1280 of 1920) from rounding down a pixel.
	vw, vh := max(int(float64(w)*s+1e-9), 1), max(int(float64(h)*s+1e-9), 1)
	for f.MaxPixels > 0 && vw*vh > f.MaxPixels && vw > 1 && vh > 1 {
		vw, vh = vw-1, max(vh*(vw-1)/vw, 1)
	}
	return vw, vh
}

// Scale returns img scaled down to f.Size of it, or img itself when it fits.
func (f Fit) Scale(img image.Image) image.Image {
	b := img.Bounds()
	dw, dh := f.Size(b.Dx(), b.Dy())
	if dw == b.Dx() && dh == b.Dy() {
		return img
	}
	return resize(img, dw, dh)
}

// ToScreen maps coordinate v of an image scaled from a side of screen pixels to scaled pixels
// back to the screen: the middle of the screen pixels scaled pixel v was averaged from (resize's
// span), so a click on a scaled pixel lands on what it showed.
func ToScreen(v, scaled, screen int) int {
	if scaled <= 0 || scaled == screen {
		return v
	}
	lo, hi := span(v, scaled, screen)
	return (lo + hi) / 2
}

// FromScreen maps screen coordinate v to the scaled image's pixel whose span holds it (ToScreen's
// inverse, up to the pixels the scaling merged).
func FromScreen(v, scaled, screen int) int {
	if screen <= 0 || scaled == screen {
		return v
	}
	return ((v+1)*scaled - 1) / screen
}

// span is the screen pixels [lo, hi) scaled pixel v of scaled is averaged from, scaling down
// from screen.
func span(v, scaled, screen int) (lo, hi int) {
	lo = v * screen / scaled
	return lo, max((v+1)*screen/scaled, lo+1)
}

type fitKey struct{}

// WithFit makes the image tools under ctx fit their images to f: the model of a step is sent
// images within its provider's limits.
func WithFit(ctx context.Context, f Fit) context.Context {
	return context.WithValue(ctx, fitKey{}, f)
}

// FitOf returns the Fit set on ctx by WithFit, or def.
func FitOf(ctx context.Context, def Fit) Fit {
	if f, ok := ctx.Value(fitKey{}).(Fit); ok {
		return f
	}
	return def
}

// Downscale shrinks img to at most maxWidth pixels wide, keeping its aspect.
func Downscale(img image.Image, maxWidth int) image.Image {
	return Fit{MaxWidth: maxWidth}.Scale(img)
}

// resize scales img down to dw×dh by averaging the source pixels each target pixel covers (a
// box filter: sharp enough for text, no dependency).
func resize(img image.Image, dw, dh int) image.Image {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	rgba, _ := img.(*image.RGBA) // a capture: its bytes are read directly, not a pixel at a time
	for y := range dh {
		y0, y1 := span(y, dh, sh)
		y0, y1 = y0+b.Min.Y, y1+b.Min.Y
		for x := range dw {
			x0, x1 := span(x, dw, sw)
			x0, x1 = x0+b.Min.X, x1+b.Min.X
			var r, g, bl, a, n uint64
			for sy := y0; sy < y1; sy++ {
				if rgba != nil {
					row := rgba.Pix[rgba.PixOffset(x0, sy):rgba.PixOffset(x1, sy)]
					for i := 0; i < len(row); i += 4 {
						r, g, bl, a = r+uint64(row[i]), g+uint64(row[i+1]), bl+uint64(row[i+2]), a+uint64(row[i+3])
					}
					n += uint64(x1 - x0)
					continue
				}
				for sx := x0; sx < x1; sx++ {
					cr, cg, cb, ca := img.At(sx, sy).RGBA()
					r, g, bl, a, n = r+uint64(cr>>8), g+uint64(cg>>8), bl+uint64(cb>>8), a+uint64(ca>>8), n+1
				}
			}
			i := dst.PixOffset(x, y)
			dst.Pix[i+0] = uint8(r / n)
			dst.Pix[i+1] = uint8(g / n)
			dst.Pix[i+2] = uint8(bl / n)
			dst.Pix[i+3] = uint8(a / n)
		}
	}
	return dst
}

// ThumbWidth is the width of the small copy of a screenshot a run's timeline shows.
const ThumbWidth = 320

// Thumb is img as a small PNG for people looking over a run, not for the model; nil when it
// cannot be encoded.
func Thumb(img image.Image) []byte {
	b, err := EncodePNG(Fit{MaxWidth: ThumbWidth}.Scale(img))
	if err != nil {
		return nil
	}
	return b
}

// EncodePNG encodes img as PNG, favouring speed: screenshots go to a model, not an archive.
func EncodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
