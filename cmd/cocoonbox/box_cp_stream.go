package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/api"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// errNoStreams: the API server predates the streamed file calls (and nothing was copied).
var errNoStreams = errors.New("the API server does not stream files")

// copyChunk is how much of a file one upload message carries.
const copyChunk = 1 << 20

// copier copies files between this machine and a box through the streamed file calls.
type copier struct {
	c         *cli.Context
	s         *session
	boxes     cbv1.BoxServiceClient
	fileRoute *api.FileClient // uploads
	ids       map[string]cocoonbox.BoxID
	recursive bool
	mode      uint32
	progress  *os.File // a terminal to draw progress on; nil: none

	files int
	bytes int64
}

// unimplemented says the server answered a file call with UNIMPLEMENTED for the method itself
// (not the box's agent lacking it, which is a message about the box).
func unimplemented(err error, method string) bool {
	return status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "method "+method)
}

// stat describes a box path: nil when nothing is there.
func (cp *copier) stat(box, p string) (*cbv1.FileInfo, error) {
	fi, err := cp.boxes.StatFile(cp.c.Context, &cbv1.StatFileRequest{Box: box, Path: p})
	switch {
	case unimplemented(err, "StatFile"):
		return nil, errNoStreams
	case status.Code(err) == codes.NotFound && strings.Contains(status.Convert(err).Message(), "no such file or directory"):
		return nil, nil // the path, not the box
	case err != nil:
		return nil, apiError(err)
	}
	return fi, nil
}

// upload copies src (a file, a directory with -r, or - for stdin) to box:dst.
func (cp *copier) upload(src, box, dst string) error {
	statPath := strings.TrimSuffix(dst, "/")
	if statPath == "" {
		statPath = "/"
	}
	there, err := cp.stat(box, statPath)
	if err != nil {
		return err
	}
	if src == "-" {
		if strings.HasSuffix(dst, "/") || there.GetType() == "dir" {
			return usageError("box cp: name the file to write from stdin, not a directory (%s)", dst)
		}
		return cp.uploadFile(cp.c.App.Reader, "stdin", -1, box, dst, cp.mode)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return cli.Exit(fmt.Sprintf("box cp: %v", err), exitNotFoundIf(err))
	}
	if strings.HasSuffix(dst, "/") || there.GetType() == "dir" {
		dst = path.Join(dst, filepath.Base(src))
	}
	if !fi.IsDir() {
		return cp.uploadPath(src, box, dst, fi)
	}
	if !cp.recursive {
		return usageError("box cp: %s is a directory; copy it with -r", src)
	}
	// What no file upload makes: directories with nothing in them, and symlinks (as they are,
	// not followed), made by one command in the box at the end.
	var empty, links []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			if entries, err := os.ReadDir(p); err == nil && len(entries) == 0 {
				empty = append(empty, target)
			}
			return nil
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return fmt.Errorf("box cp: %w", err)
			}
			return cp.uploadPath(p, box, target, fi)
		case d.Type()&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("box cp: %w", err)
			}
			links = append(links, to, target)
			return nil
		}
		fmt.Fprintf(cp.s.out.errw, "box cp: skipped %s: not a regular file, directory or symlink\n", p)
		return nil
	})
	if err != nil || len(empty)+len(links) == 0 {
		return err
	}
	const script = `n=$1; shift
while [ "$n" -gt 0 ]; do mkdir -p -- "$1" || exit; shift; n=$((n-1)); done
while [ $# -gt 0 ]; do mkdir -p -- "$(dirname -- "$2")" && ln -sfn -- "$1" "$2" || exit; shift 2; done`
	argv := append([]string{"sh", "-c", script, "sh", fmt.Sprint(len(empty))}, empty...)
	code, err := runStream(cp.c.Context, cp.boxes, &cbv1.ShellStart{Box: box, Argv: append(argv, links...)},
		streamIO{out: io.Discard, errOut: cp.s.out.errw})
	if err == nil && code != 0 {
		err = fmt.Errorf("box cp: making the empty directories and symlinks failed (exit %d)", code)
	}
	return err
}

// uploadPath uploads one local file.
func (cp *copier) uploadPath(src, box, dst string, fi fs.FileInfo) error {
	f, err := os.Open(src)
	if err != nil {
		return cli.Exit(fmt.Sprintf("box cp: %v", err), exitNotFoundIf(err))
	}
	defer f.Close()
	mode := cp.mode
	if mode == 0 {
		mode = uint32(fi.Mode().Perm())
	}
	return cp.uploadFile(f, src, fi.Size(), box, dst, mode)
}

// uploadFile streams r (size bytes, -1 when unknown) to box:dst: over the API's files route,
// or over the UploadFile stream when the route is not served (a proxy that passes only gRPC).
func (cp *copier) uploadFile(r io.Reader, name string, size int64, box, dst string, mode uint32) error {
	bar := cp.bar(name, size)
	defer bar.end()
	id, err := cp.boxID(box)
	if err != nil {
		return err
	}
	counted := &countingReader{r: r, add: bar.add}
	info, err := cp.fileRoute.Upload(cp.c.Context, id, dst, mode, size, counted)
	if errors.Is(err, api.ErrNoFileRoute) {
		return cp.uploadStream(counted, size, box, dst, mode)
	}
	if err != nil {
		return apiError(err)
	}
	cp.files++
	cp.bytes += info.Size
	return nil
}

// boxID is the ID of the box a name or ID names, which the files route takes.
func (cp *copier) boxID(box string) (cocoonbox.BoxID, error) {
	if id, ok := cp.ids[box]; ok {
		return id, nil
	}
	id, err := boxIDOf(cp.c.Context, cp.boxes, box)
	if err != nil {
		return "", err
	}
	if cp.ids == nil {
		cp.ids = map[string]cocoonbox.BoxID{}
	}
	cp.ids[box] = id
	return id, nil
}

// uploadStream streams r to box:dst over UploadFile.
func (cp *copier) uploadStream(r io.Reader, size int64, box, dst string, mode uint32) error {
	stream, err := cp.boxes.UploadFile(cp.c.Context)
	if err != nil {
		return apiError(err)
	}
	if err := stream.Send(&cbv1.UploadFileRequest{Box: box, Path: dst, Mode: mode, Size: size}); err != nil && !errors.Is(err, io.EOF) {
		return apiError(err)
	}
	buf := make([]byte, copyChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&cbv1.UploadFileRequest{Data: buf[:n]}); err != nil {
				break // the server refused: CloseAndRecv says why
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("box cp: read %s: %w", dst, rerr) // the stream is dropped: the box's file is unchanged
		}
	}
	info, err := stream.CloseAndRecv()
	if unimplemented(err, "UploadFile") {
		return errNoStreams
	}
	if err != nil {
		return apiError(err)
	}
	cp.files++
	cp.bytes += info.GetSize()
	return nil
}

// countingReader passes each read's length to add (a progress bar).
type countingReader struct {
	r   io.Reader
	add func(int)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.add(n)
	return n, err
}

// download copies box:src (a file, or a directory with -r) to dst (a local path, or - for
// stdout).
func (cp *copier) download(box, src, dst string) error {
	there, err := cp.stat(box, src)
	if err != nil {
		return err
	}
	if there == nil {
		return cli.Exit(fmt.Sprintf("box cp: %s:%s: no such file or directory", box, src), exitNotFound)
	}
	local, statErr := os.Stat(dst)
	if there.GetType() != "dir" {
		if dst != "-" && statErr == nil && local.IsDir() {
			dst = filepath.Join(dst, path.Base(src))
		}
		return cp.downloadFile(box, src, dst)
	}
	if !cp.recursive {
		return usageError("box cp: %s:%s is a directory; copy it with -r", box, src)
	}
	if dst == "-" {
		return usageError("box cp: a directory does not go to stdout (pipe a tar through box exec instead)")
	}
	if statErr == nil && local.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("box cp: %w", err)
	}
	list, err := cp.boxes.ListFiles(cp.c.Context, &cbv1.ListFilesRequest{Box: box, Path: src, Recursive: true})
	if err != nil {
		return apiError(err)
	}
	var entries []*cbv1.FileInfo
	for {
		fi, err := list.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return apiError(err)
		}
		entries = append(entries, fi)
	}
	for _, fi := range entries {
		rel, ok := strings.CutPrefix(fi.GetPath(), strings.TrimSuffix(src, "/")+"/")
		if !ok || rel == "" || !filepath.IsLocal(rel) {
			return fmt.Errorf("box cp: the box listed %q, which is not below %s", fi.GetPath(), src) // the box's word: never written outside dst
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch fi.GetType() {
		case "dir":
			err = os.MkdirAll(target, 0o755)
		case "file":
			err = cp.downloadFile(box, fi.GetPath(), target)
		case "symlink":
			_ = os.Remove(target)
			err = os.Symlink(fi.GetLink(), target)
		default:
			fmt.Fprintf(cp.s.out.errw, "box cp: skipped %s: not a regular file, directory or symlink\n", fi.GetPath())
		}
		if err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
	}
	return nil
}

// downloadFile streams box:src into dst (- is stdout), through a temporary file renamed into
// place when complete, so a broken download leaves what was there.
func (cp *copier) downloadFile(box, src, dst string) error {
	stream, err := cp.boxes.DownloadFile(cp.c.Context, &cbv1.DownloadFileRequest{Box: box, Path: src})
	if err != nil {
		return apiError(err)
	}
	first, err := stream.Recv()
	if unimplemented(err, "DownloadFile") {
		return errNoStreams
	}
	if err != nil {
		return apiError(err)
	}
	info := first.GetInfo()
	var (
		w    io.Writer = cp.s.out.w
		f    *os.File
		done bool
	)
	if dst != "-" {
		perm := fs.FileMode(info.GetMode()).Perm()
		if perm == 0 {
			perm = 0o644
		}
		f, err = os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cocoonbox-*")
		if err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		defer func() {
			if !done {
				_ = f.Close()
				_ = os.Remove(f.Name())
			}
		}()
		if err := f.Chmod(perm); err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		w = f
	}
	bar := cp.bar(src, info.GetSize())
	defer bar.end()
	var n int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return apiError(err)
		}
		if _, err := w.Write(msg.GetData()); err != nil {
			return fmt.Errorf("box cp: write %s: %w", dst, err)
		}
		n += int64(len(msg.GetData()))
		bar.add(len(msg.GetData()))
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		if err := os.Rename(f.Name(), dst); err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		done = true
	}
	cp.files++
	cp.bytes += n
	return nil
}

// progressBar draws one file's progress on a terminal, at most every 200 ms.
type progressBar struct {
	w           *os.File // nil: draws nothing
	name        string
	total, done int64
	start, last time.Time
}

func (cp *copier) bar(name string, total int64) *progressBar {
	return &progressBar{w: cp.progress, name: name, total: total, start: time.Now()}
}

func (b *progressBar) add(n int) {
	b.done += int64(n)
	if b.w != nil && time.Since(b.last) >= 200*time.Millisecond {
		b.last = time.Now()
		b.draw()
	}
}

func (b *progressBar) draw() {
	rate := float64(b.done) / max(time.Since(b.start).Seconds(), 1e-3)
	line := fmt.Sprintf("%s  %s", b.name, humanBytes(b.done))
	if b.total > 0 {
		line += fmt.Sprintf(" / %s  %3d%%", humanBytes(b.total), b.done*100/b.total)
	}
	line += fmt.Sprintf("  %s/s", humanBytes(int64(rate)))
	fmt.Fprintf(b.w, "\r\x1b[K%s", line)
}

// end draws the final state and ends the line.
func (b *progressBar) end() {
	if b.w == nil {
		return
	}
	b.draw()
	fmt.Fprintln(b.w)
}
