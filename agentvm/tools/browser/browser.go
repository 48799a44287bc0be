// Package browser gives the agent a web browser as tools: go-rod drives a chromium over the
// Chrome DevTools Protocol. In a box the chromium runs on the box's display, not headless, so
// people watching the desktop see what the agent does in it.
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// Defaults of Config's zero fields.
const (
	DefaultCallTimeout    = 30 * time.Second
	DefaultElementTimeout = 5 * time.Second
	DefaultMaxWidth       = 1280
	// maxReadText bounds browser_read's answer so one page cannot flood the model's context.
	maxReadText = 50_000
)

// Config says which chromium to drive.
type Config struct {
	// ControlURL attaches to a running chromium's DevTools endpoint: a ws:// URL, an
	// http://host:port, or a bare port. Empty launches Bin instead.
	ControlURL string
	// Bin is the chromium binary to launch (never downloaded). Empty means "chromium".
	Bin string
	// Display is the X display a launched chromium shows on (":0" in a box); empty keeps the
	// environment's DISPLAY.
	Display string
	// Headless launches without a window: for tests on hosts without a display.
	Headless bool
	// BeforeLaunch, when set, is called before chromium is launched with a window and returns
	// once the display can show it, or once it stops waiting: in a box, when the window manager
	// manages the display, since a window mapped before then stays invisible to a person
	// watching. Its wait is not counted in CallTimeout.
	BeforeLaunch func(ctx context.Context)
	// CallTimeout bounds each tool call; ElementTimeout bounds waiting for a selector to match.
	CallTimeout    time.Duration
	ElementTimeout time.Duration
	// MaxWidth is the widest screenshot handed to the model; wider ones are downscaled.
	MaxWidth int
}

// Browser is one chromium, connected on first use, with the tab the agent works in. Calls are
// serialised: the agent has one tab and one pointer.
type Browser struct {
	cfg Config

	mu       sync.Mutex
	browser  *rod.Browser
	ws       *cdp.WebSocket
	launcher *launcher.Launcher
	page     *rod.Page
}

// New returns a Browser that attaches or launches when a tool first needs it.
func New(cfg Config) *Browser {
	if cfg.Bin == "" {
		cfg.Bin = "chromium"
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.ElementTimeout <= 0 {
		cfg.ElementTimeout = DefaultElementTimeout
	}
	if cfg.MaxWidth <= 0 {
		cfg.MaxWidth = DefaultMaxWidth
	}
	return &Browser{cfg: cfg}
}

// Close disconnects, and ends the chromium if this Browser launched it.
func (b *Browser) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	if b.launcher != nil {
		if b.browser != nil {
			_ = b.browser.Close()
		}
		_ = b.ws.Close()
		b.launcher.Kill()
		b.launcher.Cleanup()
	} else if b.ws != nil {
		// Attached: leave the browser running (people may be using it); only disconnect.
		err = b.ws.Close()
	}
	b.browser, b.ws, b.launcher, b.page = nil, nil, nil, nil
	return err
}

// Tools returns the browser tools, all driving this Browser.
func (b *Browser) Tools() []tools.Tool {
	return []tools.Tool{
		tools.Func(
			"browser_open",
			"Open a URL (http, https or file) in the browser tab and wait for it to load.",
			`{"type":"object","properties":{"url":{"type":"string","description":"http, https or file URL"}},"required":["url"],"additionalProperties":false}`,
			b.open,
		),
		tools.Func(
			"browser_click",
			"Click the first element matching a CSS selector in the browser tab.",
			`{"type":"object","properties":{"selector":{"type":"string","description":"CSS selector"}},"required":["selector"],"additionalProperties":false}`,
			b.click,
		),
		tools.Func(
			"browser_type",
			"Type text into the first element matching a CSS selector (an input, textarea or editable element), at its caret.",
			`{"type":"object","properties":{"selector":{"type":"string","description":"CSS selector"},"text":{"type":"string"}},"required":["selector","text"],"additionalProperties":false}`,
			b.typeText,
		),
		tools.Func(
			"browser_read",
			"Read the visible text of the first element matching a CSS selector (default: the whole page body).",
			`{"type":"object","properties":{"selector":{"type":"string","description":"CSS selector; default body"}},"additionalProperties":false}`,
			b.read,
		),
		tools.Func(
			"browser_screenshot",
			"Take a PNG screenshot of the browser tab's viewport.",
			`{"type":"object","properties":{},"additionalProperties":false}`,
			b.screenshot,
		),
	}
}

func failed(format string, a ...any) tools.Result {
	return tools.Result{Text: fmt.Sprintf(format, a...), IsError: true}
}

func checkSelector(sel string) error {
	if strings.TrimSpace(sel) == "" {
		return tools.Invalid("selector", "must not be empty")
	}
	return nil
}

// checkURL admits only what a browser tab should be sent to by the agent: web pages and files.
func checkURL(raw string) error {
	if raw == "" {
		return tools.Invalid("url", "must not be empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return tools.Invalid("url", err.Error())
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return tools.Invalid("url", "has no host")
		}
	case "file":
	default:
		return tools.Invalid("url", fmt.Sprintf("scheme %q is not http, https or file", u.Scheme))
	}
	return nil
}

// tab connects (attaching or launching) if needed and returns the agent's tab bound to ctx.
// The caller holds b.mu.
func (b *Browser) tab(ctx context.Context) (*rod.Page, error) {
	if b.browser == nil {
		if err := b.connect(ctx); err != nil {
			return nil, err
		}
	}
	if b.page == nil {
		// Not b.browser.Context(ctx): rod derives a tab's session from the browser's context,
		// and the tab must outlive this call.
		pages, err := b.browser.Pages()
		if err != nil {
			return nil, fmt.Errorf("list tabs: %w", err)
		}
		for _, p := range pages {
			// Attached to a browser someone else started: work in its first real tab.
			if info, err := p.Context(ctx).Info(); err == nil && info.Type == proto.TargetTargetInfoTypePage {
				b.page = p
				break
			}
		}
		if b.page == nil {
			p, err := b.browser.Page(proto.TargetCreateTarget{URL: "about:blank"})
			if err != nil {
				return nil, fmt.Errorf("open tab: %w", err)
			}
			b.page = p
		}
	}
	return b.page.Context(ctx), nil
}

func (b *Browser) connect(ctx context.Context) error {
	u := b.cfg.ControlURL
	var l *launcher.Launcher
	if u == "" {
		// Leakless off: it unpacks a helper binary at run time, and the box's own process
		// supervision ends chromium with the agent anyway; Close kills what it launched.
		l = launcher.New().Context(ctx).Bin(b.cfg.Bin).Leakless(false).
			Set(flags.NoSandbox).Headless(b.cfg.Headless)
		if b.cfg.Headless {
			l = l.Set("window-size", "1280,800")
		} else {
			// A startup window, which rod turns off by default: the agent works in its tab,
			// in a window the desktop shows from the start, rather than one created over CDP.
			l = l.Set("start-maximized").Delete("no-startup-window")
		}
		if b.cfg.Display != "" {
			l = l.Env(append(os.Environ(), "DISPLAY="+b.cfg.Display)...)
		}
		var err error
		if u, err = l.Launch(); err != nil {
			l.Kill()
			return fmt.Errorf("launch chromium %s: %w", b.cfg.Bin, err)
		}
	} else if !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
		var err error
		if u, err = launcher.ResolveURL(u); err != nil {
			return fmt.Errorf("resolve devtools url: %w", err)
		}
	}
	// Our own websocket, not ControlURL: rod.Browser.Close closes the browser itself, and an
	// attached one must only be disconnected from.
	ws := &cdp.WebSocket{}
	fail := func(err error) error {
		if l != nil {
			l.Kill()
		}
		return fmt.Errorf("connect devtools: %w", err)
	}
	if err := ws.Connect(ctx, u, nil); err != nil {
		return fail(err)
	}
	br := rod.New().Client(cdp.New().Start(ws))
	if err := br.Connect(); err != nil {
		_ = ws.Close()
		return fail(err)
	}
	b.browser, b.ws, b.launcher = br, ws, l
	return nil
}

// do runs one action with the call's timeout and the Browser held. A failure to reach the
// browser at all is an error; a failure of the action is the result act returns.
func (b *Browser) do(ctx context.Context, act func(ctx context.Context, p *rod.Page) tools.Result) (tools.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.browser == nil && b.cfg.ControlURL == "" && !b.cfg.Headless && b.cfg.BeforeLaunch != nil {
		b.cfg.BeforeLaunch(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	p, err := b.tab(ctx)
	if err != nil {
		return tools.Result{}, fmt.Errorf("browser: %w", err)
	}
	res := act(ctx, p)
	if res.IsError {
		// A person may have closed the agent's tab: find or open another on the next call.
		check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, err := b.page.Context(check).Info(); err != nil {
			b.page = nil
		}
	}
	return res, nil
}

// element finds the first match of sel, waiting at most ElementTimeout, and returns it bound
// to the call's context.
func (b *Browser) element(ctx context.Context, p *rod.Page, sel string) (*rod.Element, *tools.Result) {
	el, err := p.Timeout(b.cfg.ElementTimeout).Element(sel)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			r := failed("no element matches selector %q (waited %s)", sel, b.cfg.ElementTimeout)
			return nil, &r
		}
		r := failed("find %q: %v", sel, err)
		return nil, &r
	}
	return el.Context(ctx), nil
}

func (b *Browser) open(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		URL string `json:"url"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	if err := checkURL(a.URL); err != nil {
		return tools.Result{}, err
	}
	return b.do(ctx, func(ctx context.Context, p *rod.Page) tools.Result {
		if err := p.Navigate(a.URL); err != nil {
			return failed("open %s: %v", a.URL, err)
		}
		if err := p.WaitLoad(); err != nil {
			return failed("open %s: wait for load: %v", a.URL, err)
		}
		info, err := p.Info()
		if err != nil {
			return tools.Result{Text: "opened " + a.URL}
		}
		return tools.Result{Text: fmt.Sprintf("opened %s (title %q)", info.URL, info.Title)}
	})
}

func (b *Browser) click(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Selector string `json:"selector"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	if err := checkSelector(a.Selector); err != nil {
		return tools.Result{}, err
	}
	return b.do(ctx, func(ctx context.Context, p *rod.Page) tools.Result {
		el, r := b.element(ctx, p, a.Selector)
		if r != nil {
			return *r
		}
		if err := el.Click(proto.InputMouseButtonLeft, 1); err != nil {
			return failed("click %q: %v", a.Selector, err)
		}
		return tools.Result{Text: "clicked " + a.Selector}
	})
}

func (b *Browser) typeText(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Selector string  `json:"selector"`
		Text     *string `json:"text"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	if err := checkSelector(a.Selector); err != nil {
		return tools.Result{}, err
	}
	if a.Text == nil {
		return tools.Result{}, tools.Invalid("text", "is required")
	}
	return b.do(ctx, func(ctx context.Context, p *rod.Page) tools.Result {
		el, r := b.element(ctx, p, a.Selector)
		if r != nil {
			return *r
		}
		if err := el.Input(*a.Text); err != nil {
			return failed("type into %q: %v", a.Selector, err)
		}
		return tools.Result{Text: fmt.Sprintf("typed %d characters into %s", len([]rune(*a.Text)), a.Selector)}
	})
}

func (b *Browser) read(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Selector *string `json:"selector"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	sel := "body"
	if a.Selector != nil {
		if err := checkSelector(*a.Selector); err != nil {
			return tools.Result{}, err
		}
		sel = *a.Selector
	}
	return b.do(ctx, func(ctx context.Context, p *rod.Page) tools.Result {
		el, r := b.element(ctx, p, sel)
		if r != nil {
			return *r
		}
		text, err := el.Text()
		if err != nil {
			return failed("read %q: %v", sel, err)
		}
		if len(text) > maxReadText {
			text = strings.ToValidUTF8(text[:maxReadText], "") +
				fmt.Sprintf("\n[truncated: %d of %d bytes shown; read a narrower selector]", maxReadText, len(text))
		}
		return tools.Result{Text: text}
	})
}

func (b *Browser) screenshot(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct{}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	return b.do(ctx, func(ctx context.Context, p *rod.Page) tools.Result {
		raw, err := p.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
		if err != nil {
			return failed("screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			return failed("screenshot: decode: %v", err)
		}
		// Within the step's provider's limits too, or MaxWidth where no step set them.
		small := tools.FitOf(ctx, tools.Fit{MaxWidth: b.cfg.MaxWidth}).Scale(img)
		out, err := tools.EncodePNG(small)
		if err != nil {
			return failed("screenshot: %v", err)
		}
		return tools.Result{Text: fmt.Sprintf("screenshot %dx%d", small.Bounds().Dx(), small.Bounds().Dy()), Images: [][]byte{out},
			Thumbs: [][]byte{tools.Thumb(small)}}
	})
}
