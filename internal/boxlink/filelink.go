package boxlink

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loomhand/cocoonbox/agentvm/wire"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// fileLinkHandshake bounds the opening of a file link: the dial, the preamble and its answer.
const fileLinkHandshake = 10 * time.Second

// maxFileAnswer bounds the agent's answer to an upload (a status and a FileInfo).
const maxFileAnswer = 64 << 10

// ErrNoFileLink says the box's agent did not take a file link (an agent older than file links,
// or one that refused it); nothing of the upload was read, so the caller may send it another way.
var ErrNoFileLink = errors.New("the box's agent takes no file link")

// Upload writes a file into the box over a file link (see wire.FileProtocol): head names it,
// recv yields its bytes until io.EOF. It is gRPC's WriteFile without gRPC's framing, which in a
// box costs more than the copy. ErrNoFileLink means recv was not called; any other error is a
// domain error (see Error), and a failed upload leaves the box's file as it was.
func (l *Link) Upload(ctx context.Context, b Box, head *agentvmv1.WriteFileRequest, recv func() ([]byte, error)) (*agentvmv1.FileInfo, error) {
	c, br, err := l.openFileLink(ctx, b)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()

	answer := make(chan error, 1)
	var fi *agentvmv1.FileInfo
	go func() {
		var err error
		fi, err = readFileAnswer(br)
		answer <- err
	}()
	send := func(b []byte) error {
		h := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		bufs := net.Buffers{h, b}
		_, err := bufs.WriteTo(c)
		return err
	}
	early := func() error { // an answer before the end: the agent refused the upload
		select {
		case err := <-answer:
			if err == nil {
				err = status.Error(codes.Internal, "the agent answered an upload before its end")
			}
			return err
		default:
			return nil
		}
	}
	meta, err := proto.Marshal(&agentvmv1.WriteFileRequest{Path: head.GetPath(), Mode: head.GetMode(), Size: head.GetSize()})
	if err != nil {
		return nil, err
	}
	if err := send(meta); err != nil {
		return nil, Error(ctx, brokenFileLink(answer, err))
	}
	for {
		data, err := recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err // closing the link breaks the upload: the agent replaces nothing
		}
		if err := early(); err != nil {
			return nil, Error(ctx, err)
		}
		for len(data) > 0 {
			n := min(len(data), wire.MaxFileFrame)
			if err := send(data[:n]); err != nil {
				return nil, Error(ctx, brokenFileLink(answer, err))
			}
			data = data[n:]
		}
	}
	if err := send(nil); err != nil {
		return nil, Error(ctx, brokenFileLink(answer, err))
	}
	select {
	case err := <-answer:
		if err != nil {
			return nil, Error(ctx, err)
		}
		return fi, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// brokenFileLink is the error of an upload whose link broke while it was sent: the agent's
// answer when it gave one (it refused and closed), else the broken link.
func brokenFileLink(answer <-chan error, err error) error {
	select {
	case aerr := <-answer:
		if aerr != nil {
			return aerr
		}
	case <-time.After(time.Second):
	}
	return status.Errorf(codes.Unavailable, "the file link broke: %v", err)
}

// openFileLink dials the agent's link port and opens a file link with the box's credential.
// Whatever keeps it from opening is ErrNoFileLink.
func (l *Link) openFileLink(ctx context.Context, b Box) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, fileLinkHandshake)
	defer cancel()
	c, err := l.Sandbox.DialPort(ctx, b.Ref, wire.LinkPort)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: dial: %w", ErrNoFileLink, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	br := bufio.NewReaderSize(c, 4096)
	line, err := "", error(nil)
	if _, err = io.WriteString(c, wire.FileProtocol+" "+b.Cred+"\n"); err == nil {
		line, err = br.ReadString('\n')
	}
	if !stop() {
		err = context.Cause(ctx)
	}
	if err != nil || line != "OK\n" {
		_ = c.Close()
		if err == nil {
			err = errors.New(Text(strings.TrimSpace(line)))
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrNoFileLink, err)
	}
	return c, br, nil
}

// readFileAnswer reads the agent's answer to an upload: the written file, or the agent's error
// as a gRPC status error (which Error turns into a domain error).
func readFileAnswer(r io.Reader) (*agentvmv1.FileInfo, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, status.Errorf(codes.Unavailable, "the file link closed before the agent answered: %v", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxFileAnswer {
		return nil, status.Errorf(codes.Internal, "the agent's answer to an upload is %d bytes, over %d", n, maxFileAnswer)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, status.Errorf(codes.Unavailable, "the file link closed in the agent's answer: %v", err)
	}
	st := &spb.Status{}
	if err := proto.Unmarshal(buf, st); err != nil {
		return nil, status.Errorf(codes.Internal, "the agent's answer to an upload does not parse: %v", err)
	}
	if st.GetCode() != int32(codes.OK) {
		return nil, status.ErrorProto(st)
	}
	if len(st.GetDetails()) != 1 {
		return nil, status.Error(codes.Internal, "the agent's answer to an upload has no file")
	}
	fi := &agentvmv1.FileInfo{}
	if err := st.GetDetails()[0].UnmarshalTo(fi); err != nil {
		return nil, status.Errorf(codes.Internal, "the agent's answer to an upload has no file: %v", err)
	}
	return fi, nil
}
