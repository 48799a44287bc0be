package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes scripts can rely on. They are part of the CLI's contract: change them never, add to
// them rarely, and keep exitCodesHelp in step.
const (
	exitOK          = 0
	exitError       = 1 // anything else
	exitUsage       = 2 // bad flags or arguments; the API said INVALID_ARGUMENT
	exitNotFound    = 3 // no such box, snapshot, token, secret or user (or not visible to you)
	exitDenied      = 4 // UNAUTHENTICATED or PERMISSION_DENIED
	exitConflict    = 5 // ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED
	exitUnavailable = 6 // UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED: worth retrying later
	exitQuota       = 7 // a per-user quota is reached: free something (a box, a run) first
)

// exitCodesHelp is shown in `cocoonbox --help`.
const exitCodesHelp = `EXIT CODES:
   0  ok
   1  other error
   2  usage: bad flag or argument (or the API answered INVALID_ARGUMENT)
   3  not found (a box you may not see is not found too)
   4  not authenticated or permission denied
   5  conflict or failed precondition (the box is in the wrong state, the name is taken)
   6  unavailable or resource exhausted: retry later
   7  quota reached: delete a box or wait for a run to end first
   box exec exits with the command's own exit code when the call itself succeeded.
   Errors go to stderr as "cocoonbox: <message>"; with --output json, stdout holds exactly one
   JSON document when the command succeeds and nothing when it fails.`

// grpcExitCodes is the one translation table from gRPC codes to exit codes.
var grpcExitCodes = map[codes.Code]int{
	codes.OK:                 exitOK,
	codes.InvalidArgument:    exitUsage,
	codes.OutOfRange:         exitUsage,
	codes.NotFound:           exitNotFound,
	codes.Unauthenticated:    exitDenied,
	codes.PermissionDenied:   exitDenied,
	codes.AlreadyExists:      exitConflict,
	codes.FailedPrecondition: exitConflict,
	codes.Aborted:            exitConflict,
	codes.Unavailable:        exitUnavailable,
	codes.ResourceExhausted:  exitUnavailable,
	codes.DeadlineExceeded:   exitUnavailable,
}

// apiError turns an error from a gRPC call into an exit error carrying the status message (which
// names the offending field) and the exit code for its status code.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return cli.Exit(err.Error(), exitError)
	}
	msg := s.Message()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		msg = strings.ToLower(s.Code().String())
	}
	if s.Code() == codes.Unavailable && strings.Contains(msg, "connection refused") {
		msg = "API unavailable: " + msg
	}
	return cli.Exit(msg, statusExitCode(s))
}

// statusExitCode is the exit code for a gRPC status: grpcExitCodes, except that a quota
// (RESOURCE_EXHAUSTED with a QuotaFailure detail) is exitQuota, since retrying will not help.
func statusExitCode(s *status.Status) int {
	if s.Code() == codes.ResourceExhausted {
		for _, d := range s.Details() {
			if _, ok := d.(*errdetails.QuotaFailure); ok {
				return exitQuota
			}
		}
	}
	code, ok := grpcExitCodes[s.Code()]
	if !ok {
		return exitError
	}
	return code
}

// usageError is a bad flag or argument, found before any call.
func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}

// exitCode is the process exit code for the error a command returned.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if s, ok := status.FromError(err); ok {
		return statusExitCode(s)
	}
	return exitError
}

// report prints a failed command's error as one line on w and returns the exit code. An error
// without a message (box exec passing on the command's exit code) prints nothing.
func report(err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(w, "cocoonbox:", msg)
	}
	return exitCode(err)
}

// onUsageError makes a flag parsing error exit 2 with one line, instead of printing the help.
func onUsageError(c *cli.Context, err error, _ bool) error {
	name := "cocoonbox"
	if c != nil && c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	return usageError("%s: %v (see %s --help)", commandName(name), err, name)
}

// groupAction runs for a command group given no or an unknown subcommand.
func groupAction(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("%s: unknown command %q (see %s --help)", commandName(c.Command.HelpName), c.Args().First(), c.Command.HelpName)
	}
	return cli.ShowSubcommandHelp(c)
}

// commandName is a command's name without the program's, for messages main prefixes with it.
func commandName(helpName string) string {
	if n := strings.TrimPrefix(helpName, "cocoonbox "); n != "" {
		return n
	}
	return helpName
}

// withUsageExits makes every command in cmds (and below) answer flag errors with exit code 2.
func withUsageExits(cmds []*cli.Command) []*cli.Command {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		withUsageExits(c.Subcommands)
	}
	return cmds
}
