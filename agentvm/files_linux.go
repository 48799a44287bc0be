package agentvm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/loomhand/cocoonbox/agentvm/wire"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// fileChunk is the most file data one message carries: large enough that a gigabyte is a few
// thousand messages, small enough for gRPC's flow-control windows to keep the link busy.
const fileChunk = 256 << 10

// maxPath is the longest path the file calls take (Linux's PATH_MAX).
const maxPath = 4096

// checkFilePath refuses what is not an absolute path; the path is the box's own, so nothing is
// escaped from. field names the request's field in the error.
func checkFilePath(field, p string) (string, error) {
	switch {
	case p == "":
		return "", status.Errorf(codes.InvalidArgument, "%s: is required", field)
	case len(p) > maxPath:
		return "", status.Errorf(codes.InvalidArgument, "%s: longer than %d bytes", field, maxPath)
	case !path.IsAbs(p):
		return "", status.Errorf(codes.InvalidArgument, "%s: must be an absolute path, got %q", field, p)
	}
	for _, c := range []byte(p) {
		if c == 0 {
			return "", status.Errorf(codes.InvalidArgument, "%s: holds a NUL byte", field)
		}
	}
	return path.Clean(p), nil
}

// fileError is the status of a failed file operation on p: not found, not allowed, a full
// disk, the wrong kind of file, else internal.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return status.Errorf(codes.NotFound, "%q: no such file or directory", p)
	case errors.Is(err, fs.ErrPermission):
		return status.Errorf(codes.PermissionDenied, "%q: permission denied", p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return status.Errorf(codes.ResourceExhausted, "%q: the box's disk is full", p)
	case errors.Is(err, syscall.ENOTDIR):
		return status.Errorf(codes.InvalidArgument, "%q: a part of the path is not a directory", p)
	case errors.Is(err, syscall.EISDIR):
		return status.Errorf(codes.InvalidArgument, "%q: is a directory", p)
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return status.Errorf(codes.FailedPrecondition, "%q: the directory is not empty (remove it recursively)", p)
	}
	return status.Errorf(codes.Internal, "%q: %v", p, err)
}

// fileInfo describes fi, found at p.
func fileInfo(p string, fi fs.FileInfo) *agentvmv1.FileInfo {
	info := &agentvmv1.FileInfo{Path: p, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MtimeUnixNano: fi.ModTime().UnixNano()}
	if fi.Mode()&fs.ModeSetuid != 0 {
		info.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		info.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		info.Mode |= 0o1000
	}
	switch {
	case fi.Mode().IsRegular():
		info.Type = "file"
	case fi.IsDir():
		info.Type, info.Size = "dir", 0
	case fi.Mode()&fs.ModeSymlink != 0:
		info.Type = "symlink"
		info.Link, _ = os.Readlink(p)
	default:
		info.Type = "other"
	}
	return info
}

// ReadFile streams a regular file: its info, then its bytes.
func (s *Server) ReadFile(req *agentvmv1.ReadFileRequest, stream grpc.ServerStreamingServer[agentvmv1.FileData]) error {
	p, err := checkFilePath("path", req.GetPath())
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fileError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileError(p, err)
	}
	if !fi.Mode().IsRegular() {
		kind := "not a regular file"
		if fi.IsDir() {
			kind = "a directory (copy it with recursive)"
		}
		return status.Errorf(codes.InvalidArgument, "path: %q is %s", p, kind)
	}
	if err := stream.Send(&agentvmv1.FileData{Info: fileInfo(p, fi)}); err != nil {
		return err
	}
	buf := make([]byte, fileChunk)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if err := stream.Send(&agentvmv1.FileData{Data: buf[:n]}); err != nil {
				return err
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return fileError(p, err)
		}
	}
}

// WriteFile writes a file from the stream into a temporary file beside it, renamed over it when
// the stream ends cleanly with the size it announced. A new file and the directories made for
// it belong to the owner of the directory they are made in, so a file written into the desktop
// user's home is the user's; a replaced file keeps its owner.
func (s *Server) WriteFile(stream grpc.ClientStreamingServer[agentvmv1.WriteFileRequest, agentvmv1.FileInfo]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	fi, err := writeFile(first, fromMessages(first.GetData(), func() ([]byte, error) {
		msg, err := stream.Recv()
		if err != nil {
			return nil, err // io.EOF at the end; anything else means the caller went
		}
		if msg.GetPath() != "" {
			return nil, status.Error(codes.InvalidArgument, "path: only the first message names the file")
		}
		return msg.GetData(), nil
	}))
	if err != nil {
		return err
	}
	return stream.SendAndClose(fi)
}

// fill writes an upload's bytes to f and returns how many it wrote; size is the count the
// upload announced, -1 when unknown, which it must not write more than (overSize). Its error
// is a gRPC status, or the file's own error (fileError names the path). Either leaves the
// file as it was.
type fill func(f *os.File, size int64) (int64, error)

// fromMessages is a fill writing data and then what next yields until io.EOF.
func fromMessages(data []byte, next func() ([]byte, error)) fill {
	return func(f *os.File, size int64) (int64, error) {
		var n int64
		for {
			if len(data) > 0 {
				if err := overSize(size, n+int64(len(data))); err != nil {
					return n, err
				}
				if _, err := f.Write(data); err != nil {
					return n, err
				}
				n += int64(len(data))
			}
			var err error
			if data, err = next(); errors.Is(err, io.EOF) {
				return n, nil
			} else if err != nil {
				return n, err // the caller went: nothing is replaced
			}
		}
	}
}

// overSize refuses an upload that carries more than the size it announced.
func overSize(size, n int64) error {
	if size >= 0 && n > size {
		return status.Errorf(codes.InvalidArgument, "size: the stream carries more than the %d bytes it announced", size)
	}
	return nil
}

// writeFile writes the file first names with what fill writes; an error from fill leaves the
// file as it was.
func writeFile(first *agentvmv1.WriteFileRequest, fill fill) (*agentvmv1.FileInfo, error) {
	p, err := checkFilePath("path", first.GetPath())
	if err != nil {
		return nil, err
	}
	if first.GetMode() > 0o7777 {
		return nil, status.Errorf(codes.InvalidArgument, "mode: must be permission bits (at most 07777), got %o", first.GetMode())
	}
	size := first.GetSize()
	if size < -1 {
		return nil, status.Errorf(codes.InvalidArgument, "size: must be -1 (unknown) or more, got %d", size)
	}
	dir := path.Dir(p)
	if err := mkdirOwned(dir); err != nil {
		return nil, err
	}
	owner, mode := ownerOf(dir), first.GetMode()
	if old, err := os.Stat(p); err == nil {
		if old.IsDir() {
			return nil, status.Errorf(codes.InvalidArgument, "path: %q is a directory", p)
		}
		if st, ok := old.Sys().(*syscall.Stat_t); ok {
			owner = [2]int{int(st.Uid), int(st.Gid)}
		}
		if mode == 0 {
			mode = uint32(old.Mode().Perm())
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	tmp := path.Join(dir, "."+path.Base(p)+".cocoonbox-"+hex.EncodeToString(r[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fileError(p, err)
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	n, err := fill(f, size)
	if _, ok := status.FromError(err); !ok {
		return nil, fileError(p, err)
	} else if err != nil {
		return nil, err
	}
	if size >= 0 && n != size {
		return nil, status.Errorf(codes.InvalidArgument, "size: the stream ended after %d of the %d bytes it announced; the file is unchanged", n, size)
	}
	_ = f.Chown(owner[0], owner[1]) // before the mode: chown clears setuid and setgid
	if err := f.Chmod(fs.FileMode(mode&0o777) | unixModeBits(mode)); err != nil {
		return nil, fileError(p, err)
	}
	if err := f.Close(); err != nil {
		return nil, fileError(p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return nil, fileError(p, err)
	}
	done = true
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fileError(p, err)
	}
	return fileInfo(p, fi), nil
}

// serveFileLink takes one upload on a file link whose credential was checked (see
// wire.FileProtocol) and answers how it went.
func (s *Server) serveFileLink(c net.Conn) {
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("OK\n")); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	var fi *agentvmv1.FileInfo
	head, err := readFrame(c, nil)
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.InvalidArgument, "file link: the upload ended before its WriteFileRequest")
	}
	if err == nil {
		first := &agentvmv1.WriteFileRequest{}
		if err = proto.Unmarshal(head, first); err != nil {
			err = status.Errorf(codes.InvalidArgument, "file link: the first frame is not a WriteFileRequest: %v", err)
		} else {
			fi, err = writeFile(first, fromFrames(c))
		}
	}
	var detail *anypb.Any
	if err == nil {
		detail, err = anypb.New(fi)
	}
	answer := status.New(codes.OK, "").Proto()
	if err != nil {
		answer = status.Convert(err).Proto()
		s.cfg.Logger.Warn("file link", "err", err)
	} else {
		answer.Details = []*anypb.Any{detail}
	}
	out, _ := proto.Marshal(answer)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(out)))
	if _, werr := c.Write(append(msg, out...)); werr != nil || err == nil {
		return
	}
	// A refused upload's sender is still sending: read what is on its way for a while, so the
	// answer reaches it instead of a reset that would drop it.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(refusedDrain))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, maxRefusedDrain))
}

// readFrame reads a file link's next frame into buf (grown when short); the empty frame that
// ends the file is io.EOF.
func readFrame(c net.Conn, buf []byte) ([]byte, error) {
	n, err := frameLen(c)
	if err != nil {
		return nil, err
	}
	if int(n) > cap(buf) {
		buf = make([]byte, n)
	}
	if _, err := io.ReadFull(c, buf[:n]); err != nil {
		return nil, status.Errorf(codes.Canceled, "file link: %v", err)
	}
	return buf[:n], nil
}

// frameLen reads a file link frame's length; the empty frame that ends the file is io.EOF.
func frameLen(c net.Conn) (int64, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, status.Errorf(codes.Canceled, "file link: %v", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > wire.MaxFileFrame {
		return 0, status.Errorf(codes.InvalidArgument, "file link: a frame of %d bytes is over the %d allowed", n, wire.MaxFileFrame)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return int64(n), nil
}

// fromFrames is a fill copying a file link's frames from c to the file. Each frame's bytes go
// from the socket to the file by splice(2) (os.File.ReadFrom of a TCP connection), never through
// the agent's memory: under gVisor a read and a write of each chunk cost the box's kernel more
// CPU than its own copy, and the box's CPU is what bounds a copy into it (make bench:
// BoxSession/Upload1GiB beside RawRelayUploadToDisk1GiB).
func fromFrames(c net.Conn) fill {
	return func(f *os.File, size int64) (int64, error) {
		var total int64
		for {
			n, err := frameLen(c)
			if errors.Is(err, io.EOF) {
				return total, nil
			} else if err != nil {
				return total, err
			}
			if err := overSize(size, total+n); err != nil {
				return total, err
			}
			m, err := io.CopyN(f, c, n)
			total += m
			switch {
			case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
				return total, err // fileError says the disk is full
			case err != nil: // splice does not say which end failed; the link is the likely one
				return total, status.Errorf(codes.Canceled, "file link: %v", err)
			}
		}
	}
}

// A refused upload's bytes still on their way are read for at most refusedDrain, up to
// maxRefusedDrain of them.
const (
	refusedDrain    = 5 * time.Second
	maxRefusedDrain = 256 << 20
)

// unixModeBits turns the setuid, setgid and sticky bits of mode into Go's.
func unixModeBits(mode uint32) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ownerOf is the uid and gid of dir, root's when it cannot be read.
func ownerOf(dir string) [2]int {
	fi, err := os.Stat(dir)
	if err != nil {
		return [2]int{0, 0}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]int{int(st.Uid), int(st.Gid)}
	}
	return [2]int{0, 0}
}

// mkdirOwned makes dir and its missing parents, each owned as the directory it is made in.
func mkdirOwned(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return status.Errorf(codes.InvalidArgument, "path: %q is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fileError(dir, err)
	}
	if err := mkdirOwned(path.Dir(dir)); err != nil {
		return err
	}
	owner := ownerOf(path.Dir(dir))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fileError(dir, err)
	}
	_ = os.Lchown(dir, owner[0], owner[1])
	return nil
}

// ListFiles streams the entries below a directory, in lexical order of their paths.
func (s *Server) ListFiles(req *agentvmv1.ListFilesRequest, stream grpc.ServerStreamingServer[agentvmv1.FileInfo]) error {
	root, err := checkFilePath("path", req.GetPath())
	if err != nil {
		return err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return fileError(root, err)
	}
	if !fi.IsDir() {
		return status.Errorf(codes.InvalidArgument, "path: %q is not a directory", root)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fileError(p, err)
		}
		if p == root {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while listed
		} else if err != nil {
			return fileError(p, err)
		}
		if err := stream.Send(fileInfo(p, fi)); err != nil {
			return err
		}
		if d.IsDir() && !req.GetRecursive() {
			return filepath.SkipDir
		}
		return nil
	})
}

// StatFile describes a path, not following a final symlink.
func (s *Server) StatFile(_ context.Context, req *agentvmv1.StatFileRequest) (*agentvmv1.FileInfo, error) {
	p, err := checkFilePath("path", req.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fileError(p, err)
	}
	return fileInfo(p, fi), nil
}

// RemoveFile removes a path; a directory that is not empty needs recursive. The root is never
// removed.
func (s *Server) RemoveFile(_ context.Context, req *agentvmv1.RemoveFileRequest) (*agentvmv1.RemoveFileResponse, error) {
	p, err := checkFilePath("path", req.GetPath())
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, status.Error(codes.InvalidArgument, "path: the box's root is not removed")
	}
	if _, err := os.Lstat(p); err != nil {
		return nil, fileError(p, err)
	}
	if req.GetRecursive() {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		return nil, fileError(p, err)
	}
	return &agentvmv1.RemoveFileResponse{}, nil
}
