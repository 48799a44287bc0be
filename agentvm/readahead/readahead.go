// Package readahead fills a few buffers from a stream on a goroutine of its own while the
// caller writes out the ones before, so a copy's two legs run at once instead of in turn.
// The API uses it to read a files-route body while it sends the box the bytes before. Read in
// turn, each leg stalled the other whenever it ran, since the socket buffers between them hold
// far less than a chunk. (The agent at the other end copies a file link's frames to disk by
// splice, which needs no buffers of its own.)
package readahead

import (
	"errors"
	"io"
)

// Reader hands out what fill reads, in order, each buffer the caller's until its next call to
// Next.
type Reader struct {
	full chan filled // capacity: every buffer plus the end
	free chan []byte
	done chan struct{} // closed by Stop
	gone chan struct{} // closed when the reading ends
	held []byte        // the buffer Next last returned
	err  error         // the end, once Next has returned it
}

type filled struct {
	b   []byte
	err error
}

// New starts reading with fill into bufs buffers. fill is given a spare buffer (nil at
// first; it may grow it) and returns the bytes it read into it, or the stream's end (io.EOF)
// or read error, after which it is not called again. Call Stop before the stream may no
// longer be read.
func New(bufs int, fill func(buf []byte) ([]byte, error)) *Reader {
	r := &Reader{
		full: make(chan filled, bufs+1),
		free: make(chan []byte, bufs),
		done: make(chan struct{}),
		gone: make(chan struct{}),
	}
	for range bufs {
		r.free <- nil
	}
	go func() {
		defer close(r.gone)
		for {
			var buf []byte
			select {
			case buf = <-r.free:
			case <-r.done:
				return
			}
			b, err := fill(buf)
			if err != nil {
				r.full <- filled{err: err}
				return
			}
			r.full <- filled{b: b}
		}
	}()
	return r
}

// Next returns the stream's next bytes, valid until the next call, or its end or error (every
// call after that returns it too).
func (r *Reader) Next() ([]byte, error) {
	if r.held != nil {
		r.free <- r.held
		r.held = nil
	}
	if r.err != nil {
		return nil, r.err
	}
	f := <-r.full
	if f.err != nil {
		r.err = f.err
		return nil, f.err
	}
	r.held = f.b
	return f.b, nil
}

// Stop ends the reading and waits for it. A read still under way (the caller stopped before
// the end) is made to return by unblock: a read deadline in the past.
func (r *Reader) Stop(unblock func()) {
	close(r.done)
	if r.err == nil {
		select {
		case <-r.gone:
		default:
			unblock()
		}
	}
	<-r.gone
}

// Full is a fill for r in buffers of size bytes: each holds size bytes but the last.
func Full(r io.Reader, size int) func([]byte) ([]byte, error) {
	return func(buf []byte) ([]byte, error) {
		if cap(buf) < size {
			buf = make([]byte, size)
		}
		n, err := io.ReadFull(r, buf[:size])
		if n > 0 {
			return buf[:n], nil // an error after them comes again on the next read
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return nil, err
	}
}
