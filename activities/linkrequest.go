package activities

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A model link carries plain HTTP/1.1 from the box: one request, then the worker's answer, then
// the link closes. Everything the box sends is hostile input: the request head is bounded, the
// body must say its length, and only the provider's one endpoint is forwarded.

const (
	// maxLinkHead bounds a request's line and headers together.
	maxLinkHead = 16 << 10
	// maxLinkBody bounds a request's body: a conversation with its screenshots, re-sent on every
	// model call. It is streamed to the gateway, never held.
	maxLinkBody = 32 << 20
)

// linkError is a request the worker refuses, with the status the box's model client sees and
// a message naming what was wrong.
type linkError struct {
	status int
	msg    string
}

func (e *linkError) Error() string { return fmt.Sprintf("model link: %d: %s", e.status, e.msg) }

func refuse(status int, format string, args ...any) error {
	return &linkError{status: status, msg: fmt.Sprintf(format, args...)}
}

// errLinkHead is a request head that is not HTTP/1.x.
var errLinkHead = errors.New("not an HTTP/1.1 request")

// readLinkHead reads one request head (line and headers, up to the blank line) from br, at most
// maxLinkHead bytes, and parses it. The body is what follows in br, ContentLength bytes of it:
// a chunked body, or a second request before the answer, is refused rather than framed.
func readLinkHead(br *bufio.Reader) (*http.Request, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if len(head) > maxLinkHead {
			return nil, refuse(http.StatusRequestHeaderFieldsTooLarge, "request line and headers exceed %d bytes", maxLinkHead)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(head) == 0 && errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, refuse(http.StatusBadRequest, "request head ends early: %v", err)
		}
		if len(line) <= 2 && strings.TrimRight(string(line), "\r\n") == "" && len(head) > len(line) {
			break
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "%v: %v", errLinkHead, err)
	}
	if req.ProtoMajor != 1 {
		return nil, refuse(http.StatusHTTPVersionNotSupported, "%v: %s", errLinkHead, req.Proto)
	}
	if len(req.TransferEncoding) > 0 || req.ContentLength < 0 {
		return nil, refuse(http.StatusLengthRequired, "the body needs a Content-Length (no Transfer-Encoding)")
	}
	if req.ContentLength > maxLinkBody {
		return nil, refuse(http.StatusRequestEntityTooLarge, "body of %d bytes exceeds %d", req.ContentLength, maxLinkBody)
	}
	if !strings.HasPrefix(req.RequestURI, "/") {
		return nil, refuse(http.StatusBadRequest, "request target must be a path, not %q", cut(req.RequestURI, 100))
	}
	return req, nil
}

// checkEndpoint refuses a request that is not a POST to the gateway's one endpoint for its
// provider (path is the endpoint's path as the box's client sends it).
func checkEndpoint(req *http.Request, path string) error {
	if req.Method != http.MethodPost {
		return refuse(http.StatusMethodNotAllowed, "method %s: only POST %s is forwarded", cut(req.Method, 20), path)
	}
	if req.URL.RawQuery != "" || req.URL.EscapedPath() != path {
		return refuse(http.StatusNotFound, "%s: only POST %s is forwarded", cut(req.RequestURI, 100), path)
	}
	return nil
}

// forwardedRequestHeaders are the box's headers the gateway gets; every other one, credentials
// above all (Authorization, X-Api-Key, Cookie, Proxy-Authorization), is dropped.
var forwardedRequestHeaders = []string{"Content-Type", "Accept", "Anthropic-Version", "Anthropic-Beta", "User-Agent"}

// forwardedResponseHeaders are the gateway's headers the box gets.
var forwardedResponseHeaders = []string{"Content-Type", "Retry-After", "Retry-After-Ms", "Request-Id", "X-Request-Id"}

// copyHeaders copies the named headers of src into dst, dropping values with line breaks.
func copyHeaders(dst, src http.Header, names []string) {
	for _, k := range names {
		for _, v := range src.Values(k) {
			if !strings.ContainsAny(v, "\r\n") {
				dst.Add(k, v)
			}
		}
	}
}

// writeLinkResponse writes a response head for the box: status, the given headers and
// Connection: close, since a link carries one request; the body follows until the link closes.
func writeLinkResponse(w io.Writer, status int, h http.Header) error {
	var b bytes.Buffer
	text := http.StatusText(status)
	if text == "" {
		text = "Status"
	}
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", status, text)
	h = h.Clone()
	h.Del("Connection")
	h.Del("Content-Length")
	h.Del("Transfer-Encoding")
	_ = h.Write(&b)
	b.WriteString("Connection: close\r\n\r\n")
	_, err := w.Write(b.Bytes())
	return err
}

// writeLinkError answers a refused request in the shape both providers' clients read an error
// from ({"error":{"message":...}}).
func writeLinkError(w io.Writer, status int, msg string) error {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": "model_link_error", "message": "model link: " + msg}})
	if err := writeLinkResponse(w, status, http.Header{"Content-Type": {"application/json"}}); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}
