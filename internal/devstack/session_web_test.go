package devstack_test

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/input"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// testWebSession is the web app's side of a box's session, in headless chromium: the terminal page
// types a command into the box's shell and shows its answer; a file dropped on the desktop lands
// in ~/Desktop; and the files routes the page uses stream a file each way, refusing a stranger.
func testWebSession(t *testing.T, e *desktopEnv) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run make deps")
	}
	page := openBrowser(t, e.ctx, bin)
	api := e.d.URLs().API
	step(t, "open the app", func() error { return page.Navigate(api + "/") })
	step(t, "sign in", func() error {
		el, err := page.Element("#token")
		if err != nil {
			return err
		}
		return el.Input(e.token)
	})
	click(t, page, "#signin-form button[type=submit]", "")
	page.MustElement("#box-list button")

	// The terminal page: its shell answers what is typed into it.
	step(t, "open the terminal", func() error { return page.Navigate(api + "/terminal.html#/box/" + string(e.id)) })
	readTerm := `() => { const t = window.cocoonboxTerminal; if (!t) return "";
		const b = t.buffer.active; let s = ""; for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + "\n"; return s; }`
	var shown string
	if err := testutil.Poll(e.ctx, testutil.WaitLong, func() error {
		if err := evalInto(page, readTerm, &shown); err != nil {
			return err
		}
		if !strings.Contains(shown, "user@") {
			return fmt.Errorf("no prompt yet: %q", shown)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	step(t, "type into the terminal", func() error {
		if err := page.MustElement(".xterm-helper-textarea").Focus(); err != nil {
			return err
		}
		if err := page.InsertText("echo web-$((6*7))"); err != nil {
			return err
		}
		return page.Keyboard.Type(input.Enter)
	})
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		if err := evalInto(page, readTerm, &shown); err != nil {
			return err
		}
		if !strings.Contains(shown, "\nweb-42") {
			return fmt.Errorf("the terminal shows %q", shown)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A file dropped on the desktop view is uploaded into the box's ~/Desktop.
	step(t, "open the box", func() error { return page.Navigate(api + "/#/box/" + string(e.id)) })
	page.MustElement("#screen canvas")
	step(t, "drop a file", func() error {
		_, err := page.Eval(`() => { const dt = new DataTransfer();
			dt.items.add(new File(["dropped on the desktop\n"], "dropped.txt"));
			document.getElementById("screen").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true})); }`)
		return err
	})
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		out, err := e.run("cat /home/user/Desktop/dropped.txt && stat -c %U /home/user/Desktop/dropped.txt")
		if err != nil {
			return err
		}
		if out != "dropped on the desktop\nuser\n" {
			return fmt.Errorf("in the box: %q", out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The box's events show beside the desktop as they happen: the upload the drop made is one.
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		var shown []string
		if err := evalInto(page, `() => [...document.querySelectorAll('#box-events > li')].map(li => li.textContent)`, &shown); err != nil {
			return err
		}
		if !slices.ContainsFunc(shown, func(s string) bool { return strings.Contains(s, "upload") }) {
			return fmt.Errorf("the events beside the desktop: %q", shown)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The box's open ports, each a link to its preview on its own host (a one-time ticket turned
	// into a session cookie there): a page served in the box opens in a new tab.
	if _, err := e.run(`perl -MIO::Socket::INET -e '
		my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:8000", Listen => 8, ReuseAddr => 1) or die $!;
		while (my $c = $s->accept) { my $l = <$c>; while (<$c>) { last if /^\r?\n$/ }
		  print $c "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<title>from the box</title><p id=x>served in the box</p>"; close $c }
		' </dev/null >/dev/null 2>&1 &`); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		click(t, page, "#ports-refresh", "")
		_, err := page.Timeout(time.Second).ElementR("#port-list button", "^8000$")
		return err
	}); err != nil {
		t.Fatalf("the ports list never showed 8000: %v", err)
	}
	wait := page.MustWaitOpen()
	click(t, page, "#port-list button", "^8000$")
	tab := wait()
	defer tab.MustClose()
	var text string
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		if err := evalInto(tab, `() => { const p = document.getElementById("x"); return p ? p.textContent + " at " + location.host : ""; }`, &text); err != nil {
			return err
		}
		if !strings.HasPrefix(text, "served in the box at p8000-") {
			return fmt.Errorf("the preview tab shows %q", text)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The files routes: PUT then GET the same bytes; a stranger gets 404.
	url := api + "/v1/boxes/" + string(e.id) + "/files/home/user/routes.txt"
	do := func(method, token, body string) (int, string) {
		req, _ := http.NewRequestWithContext(e.ctx, method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodPut, e.token, "through the route"); code != http.StatusOK || !strings.Contains(body, `"size":17`) {
		t.Errorf("PUT: %d %s", code, body)
	}
	if code, body := do(http.MethodGet, e.token, ""); code != http.StatusOK || body != "through the route" {
		t.Errorf("GET: %d %q", code, body)
	}
	_, stranger := apiEnv{d: e.d}.user(e.ctx, t, "stranger")
	if code, _ := do(http.MethodGet, stranger, ""); code != http.StatusNotFound {
		t.Errorf("a stranger's GET: %d, want 404", code)
	}
}
