package boxsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// FileInfo describes a path in a box, as its agent reported it (bounded and checked: it is the
// box's word).
type FileInfo struct {
	Path    string    `json:"path"`
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"modified_at"`
	Link    string    `json:"link,omitempty"`
}

// UploadStart names a file an upload writes.
type UploadStart struct {
	Path string
	Mode uint32 // 0: an existing file's, else 0644
	Size int64  // the bytes the stream carries; -1: unknown
}

// fileInfo turns what the agent said of a path into a FileInfo, refusing what no path is.
func fileInfo(fi *agentvmv1.FileInfo) (FileInfo, error) {
	p := fi.GetPath()
	if !path.IsAbs(p) || len(p) > maxPath || fi.GetSize() < 0 {
		return FileInfo{}, cocoonbox.Errorf(cocoonbox.EUnavailable, "the box's agent described a file as %q (%d bytes), which no file is", boxlink.Text(p), fi.GetSize())
	}
	info := FileInfo{Path: p, Type: fi.GetType(), Size: fi.GetSize(), Mode: fi.GetMode() & 0o7777, Link: fi.GetLink()}
	switch info.Type {
	case "file", "dir", "symlink":
	default:
		info.Type = "other"
	}
	if len(info.Link) > maxPath {
		info.Link = info.Link[:maxPath]
	}
	if ns := fi.GetMtimeUnixNano(); ns > 0 {
		info.ModTime = time.Unix(0, ns).UTC()
	}
	return info, nil
}

// DownloadFile streams a regular file out of the box (driver): info gets its description first,
// then data its bytes in order. No size limit.
func (s *Service) DownloadFile(ctx context.Context, caller string, id cocoonbox.BoxID, p string,
	info func(FileInfo) error, data func([]byte) error) error {
	if err := checkPath(p); err != nil {
		return err
	}
	return s.onSession(ctx, caller, id, func(ctx context.Context, c agentvmv1.SessionClient) error {
		stream, err := c.ReadFile(ctx, &agentvmv1.ReadFileRequest{Path: p})
		if err != nil {
			return err
		}
		first, err := stream.Recv()
		if err != nil {
			return err
		}
		fi, err := fileInfo(first.GetInfo())
		if err != nil {
			return err
		}
		if err := info(fi); err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			if err := data(msg.GetData()); err != nil {
				return err
			}
		}
	})
}

// UploadFile streams a file into the box (driver): recv yields its bytes until io.EOF. The file
// is replaced only once the whole stream has arrived with the size it announced; a broken
// upload leaves the old file as it was. No size limit beyond the box's disk.
func (s *Service) UploadFile(ctx context.Context, caller string, id cocoonbox.BoxID, start UploadStart, recv func() ([]byte, error)) (FileInfo, error) {
	if err := checkPath(start.Path); err != nil {
		return FileInfo{}, err
	}
	if start.Mode > 0o7777 {
		return FileInfo{}, cocoonbox.Invalid("mode", fmt.Sprintf("must be permission bits (at most 07777), got %o", start.Mode))
	}
	if start.Size < -1 {
		return FileInfo{}, cocoonbox.Invalid("size", fmt.Sprintf("must be -1 (unknown) or more, got %d", start.Size))
	}
	var out FileInfo
	err := s.onBox(ctx, caller, id, func(ctx context.Context, box boxlink.Box) error {
		head := &agentvmv1.WriteFileRequest{Path: start.Path, Mode: start.Mode, Size: start.Size}
		fi, err := s.Link.Upload(ctx, box, head, recv)
		if errors.Is(err, boxlink.ErrNoFileLink) {
			if s.Logger != nil {
				s.Logger.Debug("upload over gRPC", "box", id, "reason", err)
			}
			err = s.Link.Session(ctx, box, func(ctx context.Context, c agentvmv1.SessionClient) (err error) {
				fi, err = writeOverSession(ctx, c, head, recv)
				return err
			})
		}
		if err != nil {
			return err
		}
		out, err = fileInfo(fi)
		return err
	})
	if err == nil {
		s.audit(ctx, caller, id, "upload", map[string]any{"path": start.Path, "bytes": out.Size})
	}
	return out, err
}

// writeOverSession is an upload over the agent's gRPC WriteFile, for an agent that takes no
// file link.
func writeOverSession(ctx context.Context, c agentvmv1.SessionClient, head *agentvmv1.WriteFileRequest, recv func() ([]byte, error)) (*agentvmv1.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed read of the caller's bytes breaks the stream: nothing is replaced
	stream, err := c.WriteFile(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(head); err != nil {
		return nil, err
	}
	for {
		b, err := recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			continue
		}
		if err := stream.Send(&agentvmv1.WriteFileRequest{Data: b}); err != nil {
			break // the agent refused: CloseAndRecv says why
		}
	}
	return stream.CloseAndRecv()
}

// ListFiles streams the entries below a directory of the box, a tree's with recursive (driver).
func (s *Service) ListFiles(ctx context.Context, caller string, id cocoonbox.BoxID, p string, recursive bool, each func(FileInfo) error) error {
	if err := checkDir(p); err != nil {
		return err
	}
	return s.onSession(ctx, caller, id, func(ctx context.Context, c agentvmv1.SessionClient) error {
		stream, err := c.ListFiles(ctx, &agentvmv1.ListFilesRequest{Path: p, Recursive: recursive})
		if err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			fi, err := fileInfo(msg)
			if err != nil {
				return err
			}
			if err := each(fi); err != nil {
				return err
			}
		}
	})
}

// StatFile describes a path of the box (driver); a missing one is not_found naming it.
func (s *Service) StatFile(ctx context.Context, caller string, id cocoonbox.BoxID, p string) (FileInfo, error) {
	if err := checkDir(p); err != nil {
		return FileInfo{}, err
	}
	var out FileInfo
	err := s.onSession(ctx, caller, id, func(ctx context.Context, c agentvmv1.SessionClient) error {
		fi, err := c.StatFile(ctx, &agentvmv1.StatFileRequest{Path: p})
		if err != nil {
			return err
		}
		out, err = fileInfo(fi)
		return err
	})
	return out, err
}

// RemoveFile removes a path of the box (driver): a file, a symlink or an empty directory, or a
// whole tree with recursive.
func (s *Service) RemoveFile(ctx context.Context, caller string, id cocoonbox.BoxID, p string, recursive bool) error {
	if err := checkDir(p); err != nil {
		return err
	}
	err := s.onSession(ctx, caller, id, func(ctx context.Context, c agentvmv1.SessionClient) error {
		_, err := c.RemoveFile(ctx, &agentvmv1.RemoveFileRequest{Path: p, Recursive: recursive})
		return err
	})
	if err == nil {
		s.audit(ctx, caller, id, "remove_file", map[string]any{"path": p, "recursive": recursive})
	}
	return err
}

// checkDir is checkPath for a path that may name a directory (a trailing slash allowed).
func checkDir(p string) error {
	if p == "/" {
		return nil
	}
	if len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return checkPath(p)
}
