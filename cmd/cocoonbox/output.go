package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// printer writes a command's result: text for people or one JSON document for scripts on
// stdout, notes and progress on stderr.
type printer struct {
	w      io.Writer // stdout
	errw   io.Writer // stderr
	json   bool
	now    func() time.Time
	isTerm func(any) bool
}

func newPrinter(c *cli.Context) (*printer, error) {
	j, err := outputJSON(c)
	if err != nil {
		return nil, err
	}
	return &printer{w: c.App.Writer, errw: c.App.ErrWriter, json: j, now: time.Now, isTerm: isTerminal}, nil
}

// protoJSON is the one JSON form of API messages: proto field names, every field present.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// writeJSON writes m as one indented JSON document. protojson's output is deliberately unstable
// in its whitespace, so it is re-indented here to keep the output (and golden files) stable.
func writeJSON(w io.Writer, m proto.Message) error {
	raw, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return writeIndented(w, raw)
}

// writeJSONLine writes m as one line of compact JSON, for output that streams.
func writeJSONLine(w io.Writer, m proto.Message) error {
	raw, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// writeJSONList writes ms as one JSON array (empty: []).
func writeJSONList[M proto.Message](w io.Writer, ms []M) error {
	items := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		raw, err := protoJSON.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		items = append(items, raw)
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return writeIndented(w, raw)
}

// writeJSONValue writes a plain Go value (for results that are not one API message).
func writeJSONValue(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return writeIndented(w, raw)
}

func writeIndented(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// result writes m as JSON, or calls text to write it for people.
func (p *printer) result(m proto.Message, text func(io.Writer) error) error {
	if p.json {
		return writeJSON(p.w, m)
	}
	return text(p.w)
}

// list writes ms as a JSON array, or calls text to write them for people.
func listResult[M proto.Message](p *printer, ms []M, text func(io.Writer) error) error {
	if p.json {
		return writeJSONList(p.w, ms)
	}
	return text(p.w)
}

// note writes a line for people on stderr; scripts reading stdout never see it.
func (p *printer) note(format string, args ...any) {
	fmt.Fprintf(p.errw, format+"\n", args...)
}

// progress shows what a long call is doing, with the elapsed time, on stderr when stderr is a
// terminal; the returned stop clears the line. Nothing is written when stderr is not a terminal.
func (p *printer) progress(label string) (stop func()) {
	if !p.isTerm(p.errw) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(p.errw, "\r\x1b[K%c %s %.1fs", frames[i%len(frames)], label, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(p.errw, "\r\x1b[K")
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// isTerminal reports whether v is an *os.File open on a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
