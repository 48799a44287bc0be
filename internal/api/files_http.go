package api

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/readahead"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// Files over plain HTTP, for the web app's upload and download (a browser cannot stream a gRPC
// or Connect request body) and for curl: GET /v1/boxes/{id}/files/{path...} streams a file out,
// PUT streams the request body in (replacing the file only when all of it arrived; ?mode=0644
// sets its permission bits). The bearer token is checked as for DownloadFile and UploadFile, and
// the box's rules as for them: driver.

// fileChunk is how much of an upload's body one message to the box carries, and fileChunks
// how many of them are read ahead of the box.
const (
	fileChunk  = 1 << 20
	fileChunks = 4
)

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := cocoonbox.BoxID(r.PathValue("id"))
	if err := id.Validate(); err != nil {
		s.writeHTTPError(w, r, cocoonbox.RenameField(err, "box_id", "id"))
		return
	}
	p := "/" + r.PathValue("path")
	method := "/cocoonbox.v1.BoxService/DownloadFile"
	if r.Method == http.MethodPut {
		method = "/cocoonbox.v1.BoxService/UploadFile"
	}
	pr, err := s.authorize(ctx, httpBearer(r), method)
	if err != nil {
		s.writeHTTPError(w, r, err)
		return
	}
	if s.boxes == nil {
		s.writeHTTPError(w, r, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes"))
		return
	}
	caller := pr.User.ID
	if r.Method == http.MethodPut {
		var mode uint64
		if m := r.URL.Query().Get("mode"); m != "" {
			if mode, err = strconv.ParseUint(m, 8, 32); err != nil {
				s.writeHTTPError(w, r, cocoonbox.Invalid("mode", fmt.Sprintf("must be octal permission bits like 0644, got %q", m)))
				return
			}
		}
		size := r.ContentLength // -1 when the client does not say
		body := readahead.New(fileChunks, readahead.Full(r.Body, fileChunk))
		fi, err := s.boxes.UploadFile(ctx, caller, id, boxsvc.UploadStart{Path: p, Mode: uint32(mode), Size: size}, body.Next)
		body.Stop(func() { _ = http.NewResponseController(w).SetReadDeadline(time.Now()) })
		if err != nil {
			s.writeHTTPError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(fi)
		return
	}
	started := false
	err = s.boxes.DownloadFile(ctx, caller, id, p, func(fi boxsvc.FileInfo) error {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		started = true
		return nil
	}, func(b []byte) error {
		_, err := w.Write(b)
		return err
	})
	if err != nil && !started {
		s.writeHTTPError(w, r, err)
	}
	// An error once the body began cuts it short of its Content-Length: the client sees the
	// download fail rather than a short file that looks whole.
}
