// Package activities holds the side effects the workflows call: the sandbox engine, the in-box
// agent, object storage and the store. Activities are methods on structs that hold their
// dependencies, and every error leaves here as a typed ApplicationError so workflows can branch
// on it after serialization.
package activities
