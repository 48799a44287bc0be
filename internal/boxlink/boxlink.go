// Package boxlink is the one way the control plane reaches a running box's agent: it finds the
// box's sandbox, derives and writes the box's agent credential, dials the agent through the
// engine's ports relay, checks the agent's version, and turns what the agent (or the relay on
// the way to it) answers into domain errors. The API's desktop verbs and the worker's agent
// activities both use it, so none of them rebuilds these. It has no Temporal dependency.
package boxlink

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// MinAgentVersion is the oldest in-box agent whose protocol agent runs rely on: keyless model
// calls in plain HTTP over the links (0.8.0; an older agent would send its calls in TLS the
// worker no longer pipes), SetDesktopLease (0.6.1), the refusal of desktop input (0.3.0). A box
// keeps the agent of the image it was created from, so a step on an older one is refused with
// the reason rather than run by an agent that would ignore what it does not know.
const MinAgentVersion = "0.8.0"

// TokenStore finds the box's current sandbox, with its token and the node that holds it.
type TokenStore interface {
	SandboxToken(ctx context.Context, boxID string) (sandbox.SandboxRef, error)
}

// Link reaches boxes' agents. Its zero value is not usable: set Sandbox, Tokens and
// Credentials. It remembers, per sandbox, the credential it wrote and whether the agent is
// current, so it asks each sandbox once.
type Link struct {
	Sandbox sandbox.Client
	Tokens  TokenStore
	// Credentials derives a box's agent credential (see Credentials).
	Credentials func(boxID cocoonbox.BoxID) (string, error)

	written sync.Map // sandbox ID → credential known to be in that sandbox
	current sync.Map // sandbox ID → true once its agent is known to be MinAgentVersion or newer
	conns   conns    // kept connections to agents (see conns.go)
}

// Credential is the per-box agent credential: hex HMAC-SHA256 of the box ID under key.
func Credential(key []byte, boxID cocoonbox.BoxID) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(boxID))
	return hex.EncodeToString(m.Sum(nil))
}

// Credentials derives boxes' agent credentials from the keyring. Every worker and API server of
// a deployment shares the keyring, so each derives the same credential for a box: the worker
// writes it into the box, the API server presents it to the box's agent.
func Credentials(keys *secrets.Keyring) func(cocoonbox.BoxID) (string, error) {
	key := keys.Derive("agent-credential")
	return func(id cocoonbox.BoxID) (string, error) { return Credential(key, id), nil }
}

// Box is a box's sandbox as the link reaches it, with the credential its agent takes.
type Box struct {
	ID   cocoonbox.BoxID
	Ref  sandbox.SandboxRef
	Cred string
}

// Find returns the box's current sandbox and credential. A box without a sandbox is ENotFound.
func (l *Link) Find(ctx context.Context, boxID cocoonbox.BoxID) (Box, error) {
	ref, err := l.Tokens.SandboxToken(ctx, string(boxID))
	if err != nil {
		return Box{}, fmt.Errorf("read sandbox token: %w", err)
	}
	return l.At(boxID, ref)
}

// At returns the box on the sandbox ref, with its credential.
func (l *Link) At(boxID cocoonbox.BoxID, ref sandbox.SandboxRef) (Box, error) {
	cred, err := l.Credentials(boxID)
	if err != nil {
		return Box{}, fmt.Errorf("derive agent credential of box %s: %w", boxID, err)
	}
	return Box{ID: boxID, Ref: ref, Cred: cred}, nil
}

// call makes one authenticated call to the box's agent through the engine's ports relay, on the
// sandbox's kept connection (see conns.go). When the relay could not reach the agent, the error
// wraps the relay's refusal (a sandbox sentinel) rather than gRPC's UNAVAILABLE; every other
// failure is the agent's gRPC status, and Error turns either into a domain error. An agent that
// refuses the credential makes the link forget it wrote it: the file may be gone (a restored box),
// so the next EnsureCredential writes it again.
func (l *Link) call(ctx context.Context, b Box, call func(context.Context, *grpc.ClientConn) error) error {
	c, err := l.conns.get(l.Sandbox, b.Ref)
	if err != nil {
		return err
	}
	err = call(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+b.Cred), c.conn)
	switch status.Code(err) {
	case codes.Unauthenticated:
		l.written.Delete(b.Ref.ID)
	case codes.Unavailable:
		l.conns.dropIfDown(b.Ref, c)
		if dialErr := c.lastDialErr(); dialErr != nil {
			return fmt.Errorf("dial agent: %w", dialErr)
		}
	}
	return err
}

// Agents makes call on the box's agent service; errors are domain errors (see Error).
func (l *Link) Agents(ctx context.Context, b Box, call func(context.Context, agentvmv1.AgentsClient) error) error {
	return Error(ctx, l.call(ctx, b, func(ctx context.Context, conn *grpc.ClientConn) error {
		return call(ctx, agentvmv1.NewAgentsClient(conn))
	}))
}

// Desktop makes call on the box's desktop service; errors are domain errors (see Error).
func (l *Link) Desktop(ctx context.Context, b Box, call func(context.Context, agentvmv1.DesktopClient) error) error {
	return Error(ctx, l.call(ctx, b, func(ctx context.Context, conn *grpc.ClientConn) error {
		return call(ctx, agentvmv1.NewDesktopClient(conn))
	}))
}

// Session makes call on the box's session service (processes and files); errors are domain
// errors (see Error).
func (l *Link) Session(ctx context.Context, b Box, call func(context.Context, agentvmv1.SessionClient) error) error {
	return Error(ctx, l.call(ctx, b, func(ctx context.Context, conn *grpc.ClientConn) error {
		return call(ctx, agentvmv1.NewSessionClient(conn))
	}))
}

// State makes call on the box's State service (its trees in and out as tar, the snapshot path
// of an engine without disk export); errors are domain errors (see Error).
func (l *Link) State(ctx context.Context, b Box, call func(context.Context, agentvmv1.StateClient) error) error {
	return Error(ctx, l.call(ctx, b, func(ctx context.Context, conn *grpc.ClientConn) error {
		return call(ctx, agentvmv1.NewStateClient(conn))
	}))
}

// CheckVersion refuses a sandbox whose agent is older than MinAgentVersion (EConflict), asking
// it once per sandbox: a sandbox's agent binary never changes, a box gets a new one only with a
// new sandbox.
func (l *Link) CheckVersion(ctx context.Context, b Box) error {
	if _, ok := l.current.Load(b.Ref.ID); ok {
		return nil
	}
	var version string
	err := l.call(ctx, b, func(ctx context.Context, conn *grpc.ClientConn) error {
		info, err := agentvmv1.NewInfoClient(conn).Get(ctx, &agentvmv1.GetInfoRequest{})
		version = info.GetVersion()
		return err
	})
	if err != nil {
		return Error(ctx, err)
	}
	if !versionAtLeast(version, MinAgentVersion) {
		return cocoonbox.Errorf(cocoonbox.EConflict,
			"box %s runs cocoonbox-agent %q, older than the %s agent runs need: the box was created from an older image; run the agent in a new box",
			b.ID, Text(version), MinAgentVersion)
	}
	l.current.Store(b.Ref.ID, true)
	return nil
}

// EnsureCredential writes the box's credential into its sandbox unless this link knows it is
// there already. Engine errors are wrapped as they are.
func (l *Link) EnsureCredential(ctx context.Context, b Box) error {
	if v, ok := l.written.Load(b.Ref.ID); ok && v.(string) == b.Cred {
		return nil
	}
	if err := WriteCredential(ctx, l.Sandbox, b.Ref, b.Cred); err != nil {
		return err
	}
	l.written.Store(b.Ref.ID, b.Cred)
	return nil
}

// WriteCredential writes cred to wire.CredentialPath in the sandbox through the engine's exec
// (the agent need not be up, nor in the image), leaving a file that already holds it untouched.
// The credential travels in the exec's environment, not its argv, so the engine's logs of
// commands do not show it. Engine errors are wrapped as they are; a failed write is a cocoonbox
// EUnavailable error.
func WriteCredential(ctx context.Context, sb sandbox.Client, ref sandbox.SandboxRef, cred string) error {
	write := func(req sandbox.ExecRequest) error {
		res, err := sb.Exec(ctx, ref, req)
		if err != nil {
			return fmt.Errorf("write agent credential: %w", err)
		}
		return CredentialResult(res)
	}
	err := write(CredentialExec(cred))
	if OlderInit(err) {
		err = write(CredentialScriptExec(cred))
	}
	return err
}

// CredentialExec is the exec that writes cred (see WriteCredential): the box's init writes it
// itself, starting no process (an exec's process costs about 13 of its 18 ms under gVisor), so
// its success also proves the sandbox answers and a readiness probe can be this exec. A box
// whose init is older than the command answers as OlderInit says; CredentialScriptExec does
// the same with the shell there.
func CredentialExec(cred string) sandbox.ExecRequest {
	return sandbox.ExecRequest{
		Argv: []string{boxproto.InitPath, "credential", wire.CredentialPath},
		Env:  map[string]string{"COCOONBOX_CRED": cred}, TimeoutSeconds: 30,
	}
}

// OlderInit reports whether err, from CredentialExec's run (the engine's, or CredentialResult
// of its answer), comes from a box whose init has no credential command (it prints its usage),
// or whose image has no init at that path (the engine refuses the command).
func OlderInit(err error) bool {
	return errors.Is(err, errOlderInit) || errors.Is(err, sandbox.ErrInvalid)
}

// errOlderInit marks CredentialExec answered by an init older than its credential command.
var errOlderInit = errors.New("the box's init has no credential command")

// credentialScript writes $COCOONBOX_CRED to wire.CredentialPath unless the file holds it. It
// runs on every create and wake, and each process a box starts costs about 30 ms under gVisor,
// so a current file costs the shell alone (read, [ and printf are builtins). A first credential
// is written in place: the agent reads an empty file as no credential yet, as it does a missing
// one, and the 32 bytes go in one write. Only a credential that replaces another goes through mv,
// so the agent never reads half of it; and mkdir runs only in an image older than the directory
// image/build.sh makes.
const credentialScript = `f=` + wire.CredentialPath + `
cur=
read -r cur 2>/dev/null <"$f"
[ "$cur" = "$COCOONBOX_CRED" ] && exit 0
d=${f%/*}
[ -d "$d" ] || mkdir -p "$d" || exit 1
umask 077
[ -e "$f" ] || { printf %s "$COCOONBOX_CRED" >"$f"; exit; }
printf %s "$COCOONBOX_CRED" >"$f.tmp" && mv -f "$f.tmp" "$f"`

// CredentialScriptExec is CredentialExec for a box whose init is older than its credential
// command: the shell writes the file.
func CredentialScriptExec(cred string) sandbox.ExecRequest {
	return sandbox.ExecRequest{
		Argv: []string{"sh", "-c", credentialScript}, Env: map[string]string{"COCOONBOX_CRED": cred}, TimeoutSeconds: 30,
	}
}

// CredentialResult is the outcome of a CredentialExec or CredentialScriptExec run: nil, or an
// EUnavailable error with the command's words, which OlderInit recognizes when they are an older
// init's usage.
func CredentialResult(res sandbox.ExecResult) error {
	if res.ExitCode == 0 {
		return nil
	}
	e := cocoonbox.Errorf(cocoonbox.EUnavailable, "write agent credential: exit %d: %s", res.ExitCode, Text(res.Stderr))
	if strings.Contains(res.Stderr, "usage: cocoonbox-init") {
		e.Err = errOlderInit
	}
	return e
}

// Error is the table from what a call on a box's agent returned to domain errors: the agent's
// gRPC status, or the engine's refusal on the way to it (a sandbox sentinel). A request or model
// the agent refuses is permanent and carries the agent's words (bounded, printable); an agent
// that is not up yet, does not take its credential yet, or a relay that cannot reach it is
// EUnavailable. A cancelled ctx passes through, and an error that is already a domain error
// stays as it is.
func Error(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	if sandbox.FromEngine(err) {
		return DialError(err, "agent") // the engine's answer on the way, though it is a domain error too
	}
	if _, ok := errors.AsType[*cocoonbox.Error](err); ok {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return DialError(err, "agent")
	}
	msg := Text(st.Message())
	domain := func(code, msg string) error { return &cocoonbox.Error{Code: code, Message: msg, Err: err} }
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return domain(cocoonbox.EInvalid, msg)
	case codes.PermissionDenied:
		return domain(cocoonbox.EInvalid, "the box's agent refused: "+msg)
	case codes.FailedPrecondition:
		return domain(cocoonbox.EConflict, "the box's agent: "+msg)
	case codes.NotFound:
		return domain(cocoonbox.ENotFound, msg)
	case codes.Unimplemented:
		return domain(cocoonbox.EUnimplemented, "the box's agent lacks this (its image predates it): "+msg)
	case codes.Unauthenticated:
		// The agent has not read the credential file yet, or it was replaced.
		return domain(cocoonbox.EUnavailable, "the box's agent does not accept its credential yet; try again")
	case codes.ResourceExhausted: // the box's disk is full, or a message over gRPC's limit
		return domain(cocoonbox.EResourceExhausted, msg)
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return domain(cocoonbox.EUnavailable, "the box's agent is not answering ("+st.Code().String()+": "+msg+"); try again")
	}
	return domain(cocoonbox.EInternal, "the box's agent: "+st.Code().String()+": "+msg)
}

// DialError is an engine error on the way to a port of the box where what ("agent", "desktop")
// listens, with a message a person can act on. A sandbox the engine no longer has is
// EUnavailable, not permanent: waking the box brings it a new one.
func DialError(err error, what string) error {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the box's sandbox is gone; wake the box to rebuild it", Err: err}
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrTimeout):
		// The engine answers 502 when nothing listens on the port: the box is still starting
		// it, or the box's image has none.
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the box's " + what + " is not answering (" + Text(sandbox.Message(err)) + "); try again", Err: err}
	case errors.Is(err, sandbox.ErrNoCapacity):
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the sandbox engine is busy or down; try again", Err: err}
	}
	return err
}

// maxText bounds how much of a box's own text (an error message, a version, stderr) reaches a
// caller in an error message or a log line.
const maxText = 200

// Text makes text from a box fit for a message: valid UTF-8, no control characters, at most
// maxText bytes.
func Text(s string) string {
	if len(s) > 4*maxText {
		s = s[:4*maxText] // enough to fill maxText after cleaning; cut before the work
	}
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
	if len(s) > maxText {
		cut := maxText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// versionAtLeast says whether version (major.minor.patch) is min or newer; a version that does
// not parse is not.
func versionAtLeast(version, min string) bool {
	v, ok := parseVersion(version)
	m, okMin := parseVersion(min)
	if !ok || !okMin {
		return false
	}
	for i := range v {
		if v[i] != m[i] {
			return v[i] > m[i]
		}
	}
	return true
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) != len(v) {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}
