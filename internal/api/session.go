package api

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// Shell runs a command in the box with streamed input and output (driver).
func (b *boxService) Shell(stream cbv1.BoxService_ShellServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	st := first.GetStart()
	if st == nil {
		return cocoonbox.Invalid("start", "is required on the first message: what to run")
	}
	svc, caller, id, err := b.s.resolveBox(ctx, st.GetBox())
	if err != nil {
		return err
	}
	start := boxsvc.ShellStart{Argv: st.GetArgv(), Cwd: st.GetCwd(), Env: st.GetEnv(), TimeoutSeconds: int(st.GetTimeoutSeconds()),
		TTY: windowSize(st.GetTty()), Term: st.GetTerm(), User: st.GetUser()}
	pending := shellInput(first) // the first message may carry input too
	recv := func() (boxsvc.ShellInput, error) {
		if pending != nil {
			in := *pending
			pending = nil
			return in, nil
		}
		msg, err := stream.Recv()
		if err != nil {
			return boxsvc.ShellInput{}, err
		}
		if msg.GetStart() != nil {
			return boxsvc.ShellInput{}, cocoonbox.Invalid("start", "only the first message may carry it")
		}
		return *shellInput(msg), nil
	}
	return svc.Shell(ctx, caller, id, start, recv, func(out boxsvc.ShellOutput) error {
		return stream.Send(&cbv1.ShellResponse{Stdout: out.Stdout, Stderr: out.Stderr, Exited: out.Exited, ExitCode: int32(out.ExitCode), Started: out.Started})
	})
}

func shellInput(msg *cbv1.ShellRequest) *boxsvc.ShellInput {
	return &boxsvc.ShellInput{Stdin: msg.GetStdin(), StdinEOF: msg.GetStdinEof(), Resize: windowSize(msg.GetResize()), Signal: msg.GetSignal()}
}

func windowSize(w *cbv1.WindowSize) *boxsvc.WindowSize {
	if w == nil {
		return nil
	}
	return &boxsvc.WindowSize{Rows: int(w.GetRows()), Cols: int(w.GetCols())}
}

func fileInfoProto(fi boxsvc.FileInfo) *cbv1.FileInfo {
	out := &cbv1.FileInfo{Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, Link: fi.Link}
	if !fi.ModTime.IsZero() {
		out.ModifiedAt = timestamppb.New(fi.ModTime)
	}
	return out
}

// DownloadFile streams a file out of the box (driver).
func (b *boxService) DownloadFile(req *cbv1.DownloadFileRequest, stream cbv1.BoxService_DownloadFileServer) error {
	ctx := stream.Context()
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return err
	}
	return svc.DownloadFile(ctx, caller, id, req.GetPath(),
		func(fi boxsvc.FileInfo) error { return stream.Send(&cbv1.FileChunk{Info: fileInfoProto(fi)}) },
		func(b []byte) error { return stream.Send(&cbv1.FileChunk{Data: b}) })
}

// UploadFile streams a file into the box (driver).
func (b *boxService) UploadFile(stream cbv1.BoxService_UploadFileServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, first.GetBox())
	if err != nil {
		return err
	}
	pending := first.GetData()
	recv := func() ([]byte, error) {
		if pending != nil {
			b := pending
			pending = nil
			return b, nil
		}
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if msg.GetBox() != "" || msg.GetPath() != "" {
			return nil, cocoonbox.Invalid("path", "only the first message names the file")
		}
		return msg.GetData(), nil
	}
	fi, err := svc.UploadFile(ctx, caller, id, boxsvc.UploadStart{Path: first.GetPath(), Mode: first.GetMode(), Size: first.GetSize()}, recv)
	if err != nil {
		return err
	}
	return stream.SendAndClose(fileInfoProto(fi))
}

// ListFiles streams a directory's entries (driver).
func (b *boxService) ListFiles(req *cbv1.ListFilesRequest, stream cbv1.BoxService_ListFilesServer) error {
	ctx := stream.Context()
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return err
	}
	return svc.ListFiles(ctx, caller, id, req.GetPath(), req.GetRecursive(), func(fi boxsvc.FileInfo) error {
		return stream.Send(fileInfoProto(fi))
	})
}

// StatFile describes a path in the box (driver).
func (b *boxService) StatFile(ctx context.Context, req *cbv1.StatFileRequest) (*cbv1.FileInfo, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	fi, err := svc.StatFile(ctx, caller, id, req.GetPath())
	if err != nil {
		return nil, err
	}
	return fileInfoProto(fi), nil
}

// RemoveFile removes a path in the box (driver).
func (b *boxService) RemoveFile(ctx context.Context, req *cbv1.RemoveFileRequest) (*cbv1.RemoveFileResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	if err := svc.RemoveFile(ctx, caller, id, req.GetPath(), req.GetRecursive()); err != nil {
		return nil, err
	}
	return &cbv1.RemoveFileResponse{}, nil
}
