package tools

import (
	"context"
	"image"
	"image/color"
	"testing"
)

// TestFitSize: an image is scaled to the largest size of its aspect within every limit, and
// one within them is kept as it is.
func TestFitSize(t *testing.T) {
	cases := []struct {
		fit          Fit
		w, h         int
		wantW, wantH int
	}{
		{Fit{}, 2560, 1600, 2560, 1600},
		{Fit{MaxWidth: 1280}, 1280, 800, 1280, 800},
		{Fit{MaxWidth: 1280}, 1920, 1080, 1280, 720},
		{Fit{MaxWidth: 1280}, 640, 400, 640, 400},
		{Fit{MaxLongEdge: 2048, MaxShortEdge: 768}, 1280, 800, 1228, 768},
		{Fit{MaxLongEdge: 2048, MaxShortEdge: 768}, 1920, 1080, 1365, 768},
		{Fit{MaxLongEdge: 2048, MaxShortEdge: 768}, 800, 2560, 640, 2048},
		{Fit{MaxLongEdge: 1568, MaxPixels: 1_150_000}, 1280, 800, 1280, 800},
		{Fit{MaxLongEdge: 1568, MaxPixels: 1_150_000}, 1920, 1080, 1429, 804},
		{Fit{MaxLongEdge: 1568, MaxPixels: 1_150_000}, 2560, 1600, 1356, 847},
		{Fit{MaxLongEdge: 1568}, 4000, 100, 1568, 39},
		{Fit{MaxWidth: 10}, 5000, 1, 10, 1},
	}
	for _, c := range cases {
		w, h := c.fit.Size(c.w, c.h)
		if w != c.wantW || h != c.wantH {
			t.Errorf("%+v.Size(%d, %d) = %dx%d, want %dx%d", c.fit, c.w, c.h, w, h, c.wantW, c.wantH)
		}
		if c.fit.MaxPixels > 0 && w*h > c.fit.MaxPixels {
			t.Errorf("%+v.Size(%d, %d) = %dx%d: over the pixel limit", c.fit, c.w, c.h, w, h)
		}
	}
}

// TestToScreenLandsInThePixel: a point on a scaled image maps back to a screen pixel the scaled
// pixel was averaged from (the middle of them), for every pixel of a row at each scale, and
// FromScreen takes it back to the same scaled pixel.
func TestToScreenLandsInThePixel(t *testing.T) {
	for _, c := range []struct{ scaled, screen int }{{1280, 1280}, {1228, 1280}, {1365, 1920}, {1429, 1920}, {1356, 2560}, {768, 1600}, {847, 1600}} {
		for v := range c.scaled {
			s := ToScreen(v, c.scaled, c.screen)
			lo, hi := v*c.screen/c.scaled, max((v+1)*c.screen/c.scaled, v*c.screen/c.scaled+1)
			if s < lo || s >= hi {
				t.Fatalf("scaled %d of %d to screen %d: %d, outside the pixel's screen span [%d, %d)", v, c.scaled, c.screen, s, lo, hi)
			}
			if back := FromScreen(s, c.scaled, c.screen); back != v {
				t.Fatalf("scaled %d of %d: screen %d of %d maps back to %d", v, c.scaled, s, c.screen, back)
			}
		}
	}
}

// TestFitScale: the scaled image has Size's size and the colours of what it was scaled from.
func TestFitScale(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 1920, 1080))
	red := color.RGBA{R: 255, A: 255}
	for y := 500; y < 520; y++ {
		for x := 960; x < 980; x++ {
			src.Set(x, y, red)
		}
	}
	fit := Fit{MaxLongEdge: 1568, MaxPixels: 1_150_000}
	got := fit.Scale(src)
	if b := got.Bounds(); b.Dx() != 1429 || b.Dy() != 804 {
		t.Fatalf("scaled to %v, want 1429x804", b)
	}
	x, y := FromScreen(970, 1429, 1920), FromScreen(510, 804, 1080)
	if r, _, _, _ := got.At(x, y).RGBA(); r>>8 != 255 {
		t.Fatalf("the red square's middle at %d,%d of the scaled image is %v", x, y, got.At(x, y))
	}
	if (Fit{}).Scale(src) != image.Image(src) {
		t.Fatal("the zero Fit copied the image")
	}
}

// TestFitOf: the tools use the Fit set on their context, or their own default.
func TestFitOf(t *testing.T) {
	def := Fit{MaxWidth: 1280}
	if got := FitOf(context.Background(), def); got != def {
		t.Fatalf("FitOf without WithFit = %+v", got)
	}
	set := Fit{MaxLongEdge: 2048, MaxShortEdge: 768}
	if got := FitOf(WithFit(context.Background(), set), def); got != set {
		t.Fatalf("FitOf = %+v, want %+v", got, set)
	}
}
