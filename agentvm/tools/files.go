package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// File limits.
const (
	ReadFileMax    = 1 << 20 // bytes read_file returns
	WriteFileMax   = 8 << 20 // bytes write_file accepts
	ListDirMaxRows = 1000    // entries list_dir returns
)

// Files returns the file tools (read_file, write_file, list_dir); relative paths resolve
// against dir (empty: the agent's working directory).
func Files(dir string) []Tool {
	return []Tool{ReadFile{Dir: dir}, WriteFile{Dir: dir}, ListDir{Dir: dir}}
}

// resolve makes path absolute against dir.
func resolve(dir, path string) string {
	if filepath.IsAbs(path) || dir == "" {
		return filepath.Clean(path)
	}
	return filepath.Join(dir, path)
}

type pathArgs struct {
	Path string `json:"path"`
}

func (a pathArgs) check() error {
	if strings.TrimSpace(a.Path) == "" {
		return fmt.Errorf("%w: path is required", ErrInvalid)
	}
	if strings.ContainsRune(a.Path, 0) {
		return fmt.Errorf("%w: path contains a NUL byte", ErrInvalid)
	}
	return nil
}

// failed is a Result reporting err to the model.
func failed(format string, args ...any) (Result, error) {
	return Result{Text: fmt.Sprintf(format, args...), IsError: true}, nil
}

// ReadFile is the `read_file` tool.
type ReadFile struct{ Dir string }

// Name is "read_file".
func (ReadFile) Name() string { return "read_file" }

// Description tells the model what the tool does.
func (ReadFile) Description() string {
	return "Read a UTF-8 text file from the box (at most 1 MiB is returned; use shell for more or for binary files)."
}

// Schema is the JSON schema of the arguments.
func (ReadFile) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"the file's path"}},"required":["path"],"additionalProperties":false}`)
}

// Call reads the file.
func (t ReadFile) Call(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a pathArgs
	if err := DecodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if err := a.check(); err != nil {
		return Result{}, err
	}
	path := resolve(t.Dir, a.Path)
	f, err := os.Open(path)
	if err != nil {
		return failed("read %s: %v", path, unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return failed("read %s: %v", path, unwrapPath(err))
	}
	if st.IsDir() {
		return failed("read %s: is a directory; use list_dir", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, ReadFileMax+1))
	if err != nil {
		return failed("read %s: %v", path, unwrapPath(err))
	}
	truncated := len(data) > ReadFileMax
	if truncated {
		data = data[:ReadFileMax]
		// Cut at a rune boundary so a multi-byte character is not split.
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) {
		return failed("read %s: not UTF-8 text (%d bytes); use shell (e.g. base64 or xxd)", path, st.Size())
	}
	text := string(data)
	if truncated {
		text += fmt.Sprintf("\n[truncated: the file is %d bytes, only the first %d are shown; use shell to read the rest]", st.Size(), len(data))
	}
	return Result{Text: text}, nil
}

// WriteFile is the `write_file` tool.
type WriteFile struct{ Dir string }

// Name is "write_file".
func (WriteFile) Name() string { return "write_file" }

// Description tells the model what the tool does.
func (WriteFile) Description() string {
	return "Write a text file in the box, replacing it whole (at most 8 MiB); missing parent directories are created."
}

// Schema is the JSON schema of the arguments.
func (WriteFile) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string","description":"the file's path"},` +
		`"content":{"type":"string","description":"the file's whole new content"}},` +
		`"required":["path","content"],"additionalProperties":false}`)
}

type writeArgs struct {
	Path    string  `json:"path"`
	Content *string `json:"content"`
}

// Call writes the file atomically: a temporary file in the same directory, then a rename.
func (t WriteFile) Call(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a writeArgs
	if err := DecodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if err := (pathArgs{Path: a.Path}).check(); err != nil {
		return Result{}, err
	}
	if a.Content == nil {
		return Result{}, fmt.Errorf("%w: content is required", ErrInvalid)
	}
	if len(*a.Content) > WriteFileMax {
		return Result{}, fmt.Errorf("%w: content is %d bytes, more than the %d allowed", ErrInvalid, len(*a.Content), WriteFileMax)
	}
	path := resolve(t.Dir, a.Path)
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return failed("write %s: is a directory", path)
		}
		mode = st.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return failed("write %s: %v", path, unwrapPath(err))
	}
	if err := WriteFileAtomic(path, []byte(*a.Content), mode); err != nil {
		return failed("write %s: %v", path, unwrapPath(err))
	}
	return Result{Text: fmt.Sprintf("wrote %d bytes to %s", len(*a.Content), path)}, nil
}

// WriteFileAtomic replaces path with data through a synced temporary file, a rename and a sync
// of the directory: a reader sees the old file or the new one, and after a crash the new one
// stays once this returned.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ListDir is the `list_dir` tool.
type ListDir struct{ Dir string }

// Name is "list_dir".
func (ListDir) Name() string { return "list_dir" }

// Description tells the model what the tool does.
func (ListDir) Description() string {
	return "List a directory in the box: one entry per line, directories ending in /, files with their size."
}

// Schema is the JSON schema of the arguments.
func (ListDir) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"the directory's path"}},"required":["path"],"additionalProperties":false}`)
}

// Call lists the directory, sorted by name.
func (t ListDir) Call(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a pathArgs
	if err := DecodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if err := a.check(); err != nil {
		return Result{}, err
	}
	path := resolve(t.Dir, a.Path)
	entries, err := os.ReadDir(path)
	if err != nil {
		return failed("list %s: %v", path, unwrapPath(err))
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var b strings.Builder
	for i, e := range entries {
		if i == ListDirMaxRows {
			fmt.Fprintf(&b, "[truncated: %d more entries]\n", len(entries)-i)
			break
		}
		switch {
		case e.IsDir():
			fmt.Fprintf(&b, "%s/\n", e.Name())
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(filepath.Join(path, e.Name()))
			fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
		default:
			var size int64
			if info, err := e.Info(); err == nil {
				size = info.Size()
			}
			fmt.Fprintf(&b, "%s\t%d\n", e.Name(), size)
		}
	}
	if len(entries) == 0 {
		b.WriteString("(empty)\n")
	}
	return Result{Text: b.String()}, nil
}

// unwrapPath drops the *PathError wrapper, whose path the message already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
