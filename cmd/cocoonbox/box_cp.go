package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/loomhand/cocoonbox/internal/api"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// maxFileBytes is the API's limit on one ReadFile or WriteFile.
const maxFileBytes = 8 << 20

func boxCpCommand() *cli.Command {
	return &cli.Command{
		Name:  "cp",
		Usage: "copy files into or out of a box",
		Description: "One side is BOX:/absolute/path, the other a local path or - for stdin/stdout. Files of any size\n" +
			"stream through the box's agent; a file is replaced only when all of it has arrived. Directories\n" +
			"need -r. Uploads keep the local file's permission bits unless --mode is given; a destination\n" +
			"that is a directory (or ends in /) gets the source's name. On a terminal, progress goes to\n" +
			"stderr. Nothing else is printed on success (with --output json: what was copied, except when\n" +
			"the download goes to stdout).\n\n" +
			"   cocoonbox box cp ./notes.txt mybox:/home/user/\n" +
			"   cocoonbox box cp -r ./site mybox:/home/user/site\n" +
			"   cocoonbox box cp mybox:/etc/os-release -\n" +
			"   tar c src | cocoonbox box cp - mybox:/tmp/src.tar",
		ArgsUsage: "SRC DST",
		Flags: apiFlags(
			&cli.StringFlag{Name: "mode", Usage: "permission bits of the uploaded file, in octal (default: the local file's, or 0644)"},
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "copy directories and everything in them"},
			&cli.BoolFlag{Name: "progress", Value: true, Usage: "show progress on stderr when it is a terminal"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "SRC DST (one of them BOX:/path)", 2, 2)
			if err != nil {
				return err
			}
			srcBox, srcPath, srcRemote := remoteSpec(args[0])
			dstBox, dstPath, dstRemote := remoteSpec(args[1])
			switch {
			case srcRemote == dstRemote:
				return usageError("box cp: exactly one of SRC and DST must be BOX:/path")
			case srcRemote && !path.IsAbs(srcPath):
				return usageError("box cp: the box path must be absolute, got %q", srcPath)
			case dstRemote && !path.IsAbs(dstPath):
				return usageError("box cp: the box path must be absolute, got %q", dstPath)
			}
			var mode uint32
			if m := c.String("mode"); m != "" {
				v, err := strconv.ParseUint(m, 8, 32)
				if err != nil || v > 0o7777 {
					return usageError("box cp: --mode: want octal permission bits like 0644, got %q", m)
				}
				mode = uint32(v)
			}
			u, token, err := target(c)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			cp := &copier{c: c, s: s, boxes: boxes, fileRoute: &api.FileClient{Base: u, Token: token},
				recursive: c.Bool("recursive"), mode: mode}
			if c.Bool("progress") && !s.out.json {
				if f, ok := s.out.errw.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					cp.progress = f
				}
			}
			if dstRemote {
				err = cp.upload(args[0], dstBox, dstPath)
			} else {
				err = cp.download(srcBox, srcPath, args[1])
			}
			if errors.Is(err, errNoStreams) {
				if cp.recursive {
					return cli.Exit("box cp: -r: the API server predates streamed files; upgrade it", exitError)
				}
				if dstRemote {
					return uploadBuffered(c, s, boxes, args[0], dstBox, dstPath, mode)
				}
				return downloadBuffered(c, s, boxes, srcBox, srcPath, args[1])
			}
			if err != nil {
				return err
			}
			if s.out.json && !(dstRemote == false && args[1] == "-") {
				return writeJSONValue(s.out.w, map[string]any{"files": cp.files, "bytes": cp.bytes})
			}
			return nil
		},
	}
}

// remoteSpec splits BOX:/path. A colon after a slash is part of a local path (./a:b).
func remoteSpec(s string) (box, p string, ok bool) {
	box, p, ok = strings.Cut(s, ":")
	if !ok || box == "" || strings.Contains(box, "/") {
		return "", "", false
	}
	return box, p, true
}

// uploadBuffered writes one file through the unary WriteFile of an API server that predates
// UploadFile: at most 8 MiB.
func uploadBuffered(c *cli.Context, s *session, boxes cbv1.BoxServiceClient, src, box, dst string, mode uint32) error {
	var r io.Reader = c.App.Reader
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return cli.Exit(fmt.Sprintf("box cp: %v", err), exitNotFoundIf(err))
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("box cp: %w", err)
		}
		if fi.IsDir() {
			return usageError("box cp: %s is a directory; copy files one at a time (or a tar archive)", src)
		}
		if mode == 0 {
			mode = uint32(fi.Mode().Perm())
		}
		r = f
	}
	if strings.HasSuffix(dst, "/") {
		if src == "-" {
			return usageError("box cp: name the file to write from stdin, not a directory (%s)", dst)
		}
		dst += filepath.Base(src)
	}
	content, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return fmt.Errorf("box cp: read %s: %w", src, err)
	}
	if len(content) > maxFileBytes {
		return usageError("box cp: %s is larger than 8 MiB", src)
	}
	resp, err := boxes.WriteFile(c.Context, &cbv1.WriteFileRequest{Box: box, Path: dst, Content: content, Mode: mode})
	if err != nil {
		return apiError(err)
	}
	if s.out.json {
		return writeJSON(s.out.w, resp)
	}
	return nil
}

// downloadBuffered reads one file through the unary ReadFile of an API server that predates
// DownloadFile: at most 8 MiB.
func downloadBuffered(c *cli.Context, s *session, boxes cbv1.BoxServiceClient, box, src, dst string) error {
	resp, err := boxes.ReadFile(c.Context, &cbv1.ReadFileRequest{Box: box, Path: src})
	if err != nil {
		return apiError(err)
	}
	if dst == "-" {
		_, err := io.Copy(s.out.w, bytes.NewReader(resp.GetContent()))
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	perm := fs.FileMode(resp.GetMode()).Perm()
	if perm == 0 {
		perm = 0o644
	}
	if err := os.WriteFile(dst, resp.GetContent(), perm); err != nil {
		return fmt.Errorf("box cp: %w", err)
	}
	if s.out.json {
		return writeJSONValue(s.out.w, map[string]any{"path": dst, "bytes": len(resp.GetContent()), "mode": fmt.Sprintf("%04o", perm)})
	}
	return nil
}

// exitNotFoundIf is exit code 3 for a missing local file, else 1.
func exitNotFoundIf(err error) int {
	if os.IsNotExist(err) {
		return exitNotFound
	}
	return exitError
}
