// Package tools defines what the resident agent can do in its box, as tools a model calls by
// name with JSON arguments: shell, files, browser and desktop live in their own files or
// subpackages, each a Tool. The same tools serve the model's tool loop, the control plane's
// calls and the in-box MCP endpoint, so a rule (a size limit, a refused argument) holds for all.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Tool is one capability the agent offers.
type Tool interface {
	// Name is what the model calls it: lowercase letters, digits and underscores.
	Name() string
	// Description tells the model what it does and when to use it.
	Description() string
	// Schema is the JSON schema (an object) of Call's arguments.
	Schema() json.RawMessage
	// Call runs the tool. Arguments that fail validation are an error wrapping ErrInvalid that
	// names the field; a failure the model should see and react to (a command exiting non-zero,
	// a file that does not exist) is a Result, not an error.
	Call(ctx context.Context, args json.RawMessage) (Result, error)
}

// Result is what a tool call gives back to the model.
type Result struct {
	Text   string
	Images [][]byte // PNG; screenshots, downscaled for the model
	// Thumbs are small copies of Images (Thumb), kept with the run's steps for people looking
	// over it; the model is not sent them.
	Thumbs [][]byte
	// IsError marks a result that reports a failure the model should react to.
	IsError bool
}

// ErrInvalid marks arguments that fail validation.
var ErrInvalid = errors.New("invalid tool arguments")

// Func is a Tool made of its parts, for a set of tools that share one receiver (the browser's
// tab, the desktop's display).
func Func(name, description, schema string, call func(ctx context.Context, args json.RawMessage) (Result, error)) Tool {
	return &funcTool{name, description, schema, call}
}

type funcTool struct {
	name, desc, schema string
	call               func(context.Context, json.RawMessage) (Result, error)
}

func (t *funcTool) Name() string            { return t.name }
func (t *funcTool) Description() string     { return t.desc }
func (t *funcTool) Schema() json.RawMessage { return json.RawMessage(t.schema) }
func (t *funcTool) Call(ctx context.Context, args json.RawMessage) (Result, error) {
	return t.call(ctx, args)
}

// Invalid is the error of an argument that fails validation, naming it.
func Invalid(field, why string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, why)
}
