package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/jezek/xgb/xproto"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// The applications of a desktop (GTK, Qt, chromium) describe their windows' widgets to the
// AT-SPI registry on the display's accessibility bus, which at-spi2-core starts with the
// session. Reading it, the model finds a button by its name and clicks its middle, where a
// screenshot leaves it guessing at pixels.

const (
	a11yRegistry   = "org.a11y.atspi.Registry"
	a11yRoot       = dbus.ObjectPath("/org/a11y/atspi/accessible/root")
	a11yAccessible = "org.a11y.atspi.Accessible"
	a11yComponent  = "org.a11y.atspi.Component"
	// maxA11yNodes and maxA11yDepth bound one tree: an application's answers are not ours to
	// trust, and a model reads a few hundred lines at most usefully.
	maxA11yNodes = 300
	maxA11yDepth = 30
	// maxA11yName bounds one element's name.
	maxA11yName = 120
)

// AT-SPI states (the bit numbers of GetState's bit set) the tree shows or uses.
const (
	stateActive    = 1
	stateChecked   = 4
	stateEditable  = 7
	stateEnabled   = 8
	stateExpanded  = 10
	stateFocused   = 12
	statePressed   = 20
	stateSelected  = 23
	stateShowing   = 25
	stateSensitive = 24
)

// shownStates are the states a line of the tree names, in its order.
var shownStates = []struct {
	bit  int
	name string
}{{stateFocused, "focused"}, {stateSelected, "selected"}, {stateChecked, "checked"}, {statePressed, "pressed"},
	{stateExpanded, "expanded"}, {stateEditable, "editable"}}

// structural roles hold other elements and say nothing themselves: an unnamed one is left out
// of the tree and its children take its place.
var structural = map[string]bool{"filler": true, "panel": true, "scroll pane": true, "viewport": true,
	"layered pane": true, "section": true, "grouping": true, "redundant object": true, "unknown": true}

// Element is one element of an accessibility tree, its box in screen pixels.
type Element struct {
	Role, Name          string
	States              []string
	X, Y, Width, Height int
	Depth               int
}

// busAddresser is a Screen that says where its display's accessibility bus is.
type busAddresser interface {
	AccessibilityBus(ctx context.Context) (string, error)
}

// errNoBus is the answer on a display whose accessibility bus has not started.
var errNoBus = errors.New("the display has no accessibility bus yet (no application has started one)")

func (d *Desktop) accessibilityTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Window string `json:"window"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	title, els, err := d.Accessibility(ctx, a.Window)
	if err != nil {
		return result(err, "")
	}
	w, h, vw, vh, err := d.view(ctx)
	if err != nil {
		return result(err, "")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "window %q; boxes are x,y width x height in screenshot pixels\n", title)
	for _, e := range els {
		x, y := tools.FromScreen(e.X, vw, w), tools.FromScreen(e.Y, vh, h)
		fmt.Fprintf(&b, "%s%s %q %d,%d %dx%d", strings.Repeat("  ", e.Depth), e.Role, e.Name,
			x, y, tools.FromScreen(e.Width, vw, w), tools.FromScreen(e.Height, vh, h))
		if len(e.States) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(e.States, ","))
		}
		b.WriteByte('\n')
	}
	if len(els) == maxA11yNodes {
		fmt.Fprintf(&b, "(cut at %d elements)\n", maxA11yNodes)
	}
	return tools.Result{Text: b.String()}, nil
}

// Accessibility reads the accessibility tree of the focused window, or of the first window
// whose title holds window (case aside) when it is not empty: the window's title and its
// showing elements in order, depth first, in screen pixels, at most maxA11yNodes.
func (d *Desktop) Accessibility(ctx context.Context, window string) (string, []Element, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	ba, ok := d.cfg.Screen.(busAddresser)
	if !ok {
		return "", nil, errNoBus
	}
	addr, err := ba.AccessibilityBus(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("desktop accessibility: %w", err)
	}
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return "", nil, fmt.Errorf("desktop accessibility: connect to the accessibility bus: %w", err)
	}
	defer func() { _ = conn.Close() }()
	t := &a11yTree{ctx: ctx, conn: conn}
	win, title, err := t.window(window)
	if err != nil {
		return "", nil, fmt.Errorf("desktop accessibility: %w", err)
	}
	if err := t.walk(win, 0); err != nil {
		return "", nil, fmt.Errorf("desktop accessibility: %w", err)
	}
	return title, t.els, nil
}

// a11yRef names an accessible object: the bus name of its application and its path.
type a11yRef struct {
	Name string
	Path dbus.ObjectPath
}

// a11yTree reads objects off one connection to the accessibility bus.
type a11yTree struct {
	ctx  context.Context
	conn *dbus.Conn
	els  []Element
}

func (t *a11yTree) call(ref a11yRef, method string, out any, args ...any) error {
	return t.conn.Object(ref.Name, ref.Path).CallWithContext(t.ctx, method, 0, args...).Store(out)
}

func (t *a11yTree) children(ref a11yRef) ([]a11yRef, error) {
	var kids []a11yRef
	err := t.call(ref, a11yAccessible+".GetChildren", &kids)
	return kids, err
}

func (t *a11yTree) name(ref a11yRef) string {
	v, err := t.conn.Object(ref.Name, ref.Path).GetProperty(a11yAccessible + ".Name")
	if err != nil {
		return ""
	}
	s, _ := v.Value().(string)
	s = strings.ToValidUTF8(strings.Join(strings.Fields(s), " "), "\uFFFD")
	if r := []rune(s); len(r) > maxA11yName {
		s = string(r[:maxA11yName]) + "…"
	}
	return s
}

// states returns ref's AT-SPI states as a bit set.
func (t *a11yTree) states(ref a11yRef) (uint64, error) {
	var words []uint32
	if err := t.call(ref, a11yAccessible+".GetState", &words); err != nil {
		return 0, err
	}
	var set uint64
	for i, w := range words[:min(len(words), 2)] {
		set |= uint64(w) << (32 * i)
	}
	return set, nil
}

// window finds the focused window, or the first whose title holds title, among the windows of
// every application the registry lists.
func (t *a11yTree) window(title string) (a11yRef, string, error) {
	apps, err := t.children(a11yRef{a11yRegistry, a11yRoot})
	if err != nil {
		return a11yRef{}, "", fmt.Errorf("list the applications: %w", err)
	}
	var seen []string
	for _, app := range apps {
		wins, err := t.children(app)
		if err != nil {
			continue // an application that went away, or does not answer
		}
		for _, w := range wins {
			name := t.name(w)
			if title != "" {
				if strings.Contains(strings.ToLower(name), strings.ToLower(title)) {
					return w, name, nil
				}
			} else if set, err := t.states(w); err == nil && set&(1<<stateActive) != 0 {
				return w, name, nil
			}
			if name != "" && len(seen) < 20 {
				seen = append(seen, fmt.Sprintf("%q", name))
			}
		}
	}
	which := "no window is focused"
	if title != "" {
		which = fmt.Sprintf("no window's title holds %q", title)
	}
	if len(seen) == 0 {
		seen = []string{"none"}
	}
	return a11yRef{}, "", fmt.Errorf("%s; the windows: %s", which, strings.Join(seen, ", "))
}

// walk adds ref and the showing elements under it, depth first.
func (t *a11yTree) walk(ref a11yRef, depth int) error {
	if len(t.els) >= maxA11yNodes || depth > maxA11yDepth {
		return nil
	}
	set, err := t.states(ref)
	if err != nil {
		if t.ctx.Err() != nil {
			return t.ctx.Err()
		}
		return nil // gone while we looked
	}
	if depth > 0 && set&(1<<stateShowing) == 0 {
		return nil
	}
	var role string
	_ = t.call(ref, a11yAccessible+".GetRoleName", &role)
	name := t.name(ref)
	next := depth
	if !structural[role] || name != "" {
		e := Element{Role: role, Name: name, Depth: depth}
		var box struct{ X, Y, W, H int32 }
		if t.call(ref, a11yComponent+".GetExtents", &box, uint32(0)) == nil { // 0: screen coordinates
			e.X, e.Y, e.Width, e.Height = int(box.X), int(box.Y), int(max(box.W, 0)), int(max(box.H, 0))
		}
		for _, s := range shownStates {
			if set&(1<<s.bit) != 0 {
				e.States = append(e.States, s.name)
			}
		}
		if set&(1<<stateEnabled) == 0 && set&(1<<stateSensitive) == 0 {
			e.States = append(e.States, "disabled")
		}
		t.els = append(t.els, e)
		next = depth + 1
	}
	kids, err := t.children(ref)
	if err != nil {
		return nil
	}
	for _, k := range kids {
		if err := t.walk(k, next); err != nil {
			return err
		}
	}
	return nil
}

// AccessibilityBus reads the address of the display's accessibility bus from the root window's
// AT_SPI_BUS property, which at-spi2-core's bus launcher sets.
func (s xScreen) AccessibilityBus(ctx context.Context) (string, error) {
	c, done, err := s.open(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	const name = "AT_SPI_BUS"
	a, err := xproto.InternAtom(c, true, uint16(len(name)), name).Reply()
	if err != nil {
		return "", fmt.Errorf("intern atom %s: %w", name, err)
	}
	if a.Atom == xproto.AtomNone {
		return "", errNoBus
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	r, err := xproto.GetProperty(c, false, root, a.Atom, xproto.GetPropertyTypeAny, 0, 1024).Reply()
	if err != nil {
		return "", fmt.Errorf("get %s: %w", name, err)
	}
	if r.Format != 8 || len(r.Value) == 0 {
		return "", errNoBus
	}
	// Only unix sockets on this machine: any client of the display may have set the property.
	addrs := slices.DeleteFunc(strings.Split(string(r.Value), ";"), func(a string) bool { return !strings.HasPrefix(a, "unix:") })
	if len(addrs) == 0 {
		return "", fmt.Errorf("the accessibility bus is at %q, not a unix socket", r.Value)
	}
	return strings.Join(addrs, ";"), nil
}
