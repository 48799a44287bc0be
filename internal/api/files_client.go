package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// FileClient uploads files to boxes over the files route (serveFile), as `box cp` does: a
// plain HTTP body carries a file's bytes with fewer syscalls and copies than the UploadFile
// stream's gRPC framing (16 KiB HTTP/2 frames), and a refused upload sends nothing (see
// continueWait). On one machine the box's side bounds a copy, so the two run alike there
// (make bench: BoxSession/Upload1GiB beside UploadGRPC1GiB).
type FileClient struct {
	Base  *url.URL // the API endpoint: http://host:port or https://host
	Token string
	// HTTP sends the requests; nil: NewFileHTTPClient's.
	HTTP *http.Client
}

// ErrNoFileRoute says the server (or a proxy before it) does not serve the files route, and
// nothing of the body was read: the caller may send the file another way (UploadFile).
var ErrNoFileRoute = errors.New("the API does not serve the files route")

// continueWait is how long an upload waits for the server's go-ahead (100 Continue, sent once
// the box's file link is open) before it sends the body anyway. A refusal (no such box, a bad
// path, a box that cannot wake) comes back in that time with nothing sent.
const continueWait = time.Minute

// NewFileHTTPClient is an HTTP client for FileClient: no overall timeout (a copy takes as
// long as its size), the environment's proxy, and the go-ahead wait above.
func NewFileHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ExpectContinueTimeout = continueWait
	t.WriteBufferSize = 256 << 10
	t.ReadBufferSize = 256 << 10
	return &http.Client{Transport: t}
}

// Upload writes body (size bytes; -1 when unknown) to the box's path, replacing the file only
// when all of it arrived; mode 0 keeps an existing file's permission bits. A refusal is a gRPC
// status error, like UploadFile's.
func (c *FileClient) Upload(ctx context.Context, box cocoonbox.BoxID, path string, mode uint32, size int64, body io.Reader) (boxsvc.FileInfo, error) {
	u := c.fileURL(box, path)
	if mode != 0 {
		u.RawQuery = url.Values{"mode": {fmt.Sprintf("%04o", mode)}}.Encode()
	}
	read := &readOnce{r: body}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), read)
	if err != nil {
		return boxsvc.FileInfo{}, err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	} else {
		req.Header.Set("Expect", "100-continue")
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client().Do(req)
	if err != nil {
		if !read.started.Load() && ctx.Err() == nil {
			return boxsvc.FileInfo{}, fmt.Errorf("%w: %w", ErrNoFileRoute, err)
		}
		return boxsvc.FileInfo{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return boxsvc.FileInfo{}, fmt.Errorf("read the API's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return boxsvc.FileInfo{}, routeError(resp, answer, read.started.Load())
	}
	var fi boxsvc.FileInfo
	if err := json.Unmarshal(answer, &fi); err != nil || fi.Path == "" {
		return boxsvc.FileInfo{}, fmt.Errorf("the API's answer to an upload is not a file: %.200q", answer)
	}
	return fi, nil
}

// fileURL is the files route of a box path.
func (c *FileClient) fileURL(box cocoonbox.BoxID, p string) *url.URL {
	return &url.URL{Scheme: c.Base.Scheme, Host: c.Base.Host, Path: "/v1/boxes/" + string(box) + "/files" + p}
}

func (c *FileClient) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultFileHTTP
}

var defaultFileHTTP = NewFileHTTPClient()

// routeError is a non-200 answer of the files route as the gRPC status error the RPC would
// have returned. An answer that is not the route's JSON error came from something else (a
// server or proxy without the route): ErrNoFileRoute when the body is still unread.
func routeError(resp *http.Response, answer []byte, started bool) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(answer, &body) != nil || body.Error.Code == "" {
		if !started {
			return fmt.Errorf("%w: %s answered %s", ErrNoFileRoute, resp.Request.URL.Redacted(), resp.Status)
		}
		return fmt.Errorf("the files route answered %s: %.200q", resp.Status, answer)
	}
	msg := body.Error.Message
	if msg == "" {
		msg = body.Error.Code + " (HTTP " + strconv.Itoa(resp.StatusCode) + ")"
	}
	return toStatus(context.Background(), discardLog, "", cocoonbox.Errorf(body.Error.Code, "%s", msg))
}

var discardLog = slog.New(slog.DiscardHandler)

// readOnce records whether the transport began to read the body: until it has, a failed
// request sent nothing of it and may be sent again another way.
type readOnce struct {
	r       io.Reader
	started atomic.Bool // set by the transport's goroutine, read by the caller
}

func (r *readOnce) Read(p []byte) (int, error) {
	r.started.Store(true)
	return r.r.Read(p)
}
