package agentvm

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// StateChunk is the most tar data one Chunk of State.Export carries.
const StateChunk = 256 << 10

// stateService is the State gRPC service: a tree of the box in and out as uncompressed tar, the
// snapshot path for an engine that cannot export the box's disk. The tar keeps what restoring a
// home directory needs: modes, owners, mtimes and symlinks (hard links become copies).
type stateService struct {
	agentvmv1.UnimplementedStateServer
	log *slog.Logger
}

var _ agentvmv1.StateServer = (*stateService)(nil)

// errInvalidPath marks a request path State refuses.
var errInvalidPath = errors.New("invalid path")

// treePath validates a request's path: absolute, and cleaned.
func treePath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: path is required", errInvalidPath)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("%w: path contains a NUL byte", errInvalidPath)
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("%w: path %q is not absolute", errInvalidPath, p)
	}
	return filepath.Clean(p), nil
}

// stateStatus is the one table from State's errors to gRPC codes.
func stateStatus(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, errInvalidPath), errors.Is(err, errUnsafeEntry), errors.Is(err, errBadTar):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, fs.ErrPermission):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, errNotDir):
		return status.Error(codes.FailedPrecondition, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

var errNotDir = errors.New("not a directory")

// treeRoot validates path and checks that it is a directory.
func treeRoot(path string) (string, error) {
	root, err := treePath(path)
	if err != nil {
		return "", err
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return "", err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s: %w", root, errNotDir)
	}
	return root, nil
}

// Stat counts the tree's entries other than directories (files, symlinks, ...) and the bytes
// of its regular files. Symlinks are not followed.
func (s *stateService) Stat(ctx context.Context, req *agentvmv1.StatRequest) (*agentvmv1.StatResponse, error) {
	root, err := treeRoot(req.GetPath())
	if err != nil {
		return nil, stateStatus(ctx, err)
	}
	var resp agentvmv1.StatResponse
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		resp.Files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			resp.Bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		return nil, stateStatus(ctx, fmt.Errorf("stat tree: %w", err))
	}
	return &resp, nil
}

// chunkWriter sends what is written as Chunks of StateChunk bytes at most.
type chunkWriter struct {
	stream grpc.ServerStreamingServer[agentvmv1.Chunk]
	buf    []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(StateChunk-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == StateChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.stream.Send(&agentvmv1.Chunk{Data: w.buf})
	w.buf = make([]byte, 0, StateChunk) // Send may keep the slice until it is on the wire
	return err
}

// Export streams the tree as an uncompressed tar whose names are relative to the path, the
// path itself first as "./".
func (s *stateService) Export(req *agentvmv1.ExportRequest, stream grpc.ServerStreamingServer[agentvmv1.Chunk]) error {
	ctx := stream.Context()
	root, err := treeRoot(req.GetPath())
	if err != nil {
		return stateStatus(ctx, err)
	}
	cw := &chunkWriter{stream: stream, buf: make([]byte, 0, StateChunk)}
	tw := tar.NewWriter(cw)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return s.exportEntry(tw, root, p, d)
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		return stateStatus(ctx, fmt.Errorf("export tree: %w", err))
	}
	return nil
}

// exportEntry writes one entry of the tree. Sockets, which tar cannot hold, are skipped; so is a
// file that vanished while the tree was walked.
func (s *stateService) exportEntry(tw *tar.Writer, root, p string, d fs.DirEntry) error {
	if d.Type()&fs.ModeSocket != 0 {
		return nil
	}
	fi, err := d.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name = strings.TrimSuffix(hdr.Name, "/") + "/"
		if rel == "." {
			hdr.Name = "./"
		}
	}
	hdr.Format = tar.FormatPAX // long names, big files, sub-second mtimes
	if !fi.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that shrank while being read is padded with zeros to the size its header
	// announced, so the stream stays a valid tar.
	_, err = io.CopyN(tw, io.MultiReader(io.LimitReader(f, hdr.Size), zeros{}), hdr.Size)
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
