package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/config"
)

// clientFlags are shared by every command that talks to the API.
func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoint", Usage: "API endpoint (default from the CLI config written by cocoonbox dev)"},
		&cli.StringFlag{Name: "token", Usage: "API token (default from the CLI config; or COCOONBOX_TOKEN)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
		&cli.DurationFlag{Name: "timeout", Value: defaultCallTimeout, Usage: callTimeoutUsage},
	}
}

// defaultCallTimeout bounds each call that is not a stream: long enough for a cold desktop or a
// large snapshot, short enough that a dependency that is down is reported rather than waited on.
const defaultCallTimeout = 5 * time.Minute

// callTimeoutUsage also tells the client's --timeout from a command's own (box exec's).
const callTimeoutUsage = "give up waiting on the API after this long, saying why (0: wait as long as it takes)"

// callTimeout is the command's --timeout for calls, 0 for none; a command with a --timeout of
// its own (box exec: how long the command may run) bounds its call itself.
func callTimeout(c *cli.Context) time.Duration {
	if c.Command == nil {
		return 0
	}
	for _, f := range c.Command.Flags {
		if df, ok := f.(*cli.DurationFlag); ok && df.Name == "timeout" && df.Usage == callTimeoutUsage {
			return c.Duration("timeout")
		}
	}
	return 0
}

// boundCalls puts the --timeout deadline on every unary call without one; streams (exec output,
// the desktop, watch) run as long as they are used.
func boundCalls(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); ok || d <= 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && timedOut(ctx, err) {
			// The server had no reason to give in time (it gives one when it has: unavailable).
			return status.Errorf(codes.DeadlineExceeded, "no answer within --timeout %s; what was asked may still finish on the server", d)
		}
		return err
	}
}

// timeoutSlack is how close to its deadline a call's cancellation counts as the deadline's.
const timeoutSlack = 50 * time.Millisecond

// timedOut reports whether a call on ctx failed for running out of its deadline: ctx's own
// timer fired, or the server gave up first on the deadline the call carried to it (sent rounded
// down, so it may expire a moment before ctx's), which the client reads as a cancelled stream.
func timedOut(ctx context.Context, err error) bool {
	code := status.Code(err)
	if code == codes.Unavailable {
		return false
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && (code == codes.Canceled || code == codes.DeadlineExceeded) && time.Until(dl) < timeoutSlack
}

// dial connects to the API with the caller's token from flags, environment or the CLI config.
func dial(c *cli.Context) (*grpc.ClientConn, error) {
	u, token, err := target(c)
	if err != nil {
		return nil, err
	}
	return dialTarget(u, token, grpc.WithChainUnaryInterceptor(boundCalls(callTimeout(c)), resendUnanswered))
}

// requestID is a new request ID for a call that changes a box: sent again, the server makes it
// the same operation (see resendUnanswered).
func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// resendUnanswered sends a call with a request ID again while the API itself does not answer
// (it restarts, the connection dropped mid-call), backing off, until the call's deadline: the
// server makes every send of one request ID one operation, so none is done twice. An
// unavailable answer from the API (a dependency behind it is down) is returned as it is.
func resendUnanswered(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r, ok := req.(interface{ GetRequestId() string })
	if !ok || r.GetRequestId() == "" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	wait := resendFirst
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable || answered(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "the API is not answering (%s); what was asked may still finish there", status.Convert(err).Message())
		case <-time.After(wait):
		}
		wait = min(2*wait, resendMax)
	}
}

// resendFirst and resendMax bound the wait between sends of an unanswered call.
const (
	resendFirst = 100 * time.Millisecond
	resendMax   = 2 * time.Second
)

// answered reports whether an unavailable error is the API's answer (a dependency of it is
// down), not the API failing to answer.
func answered(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == api.ErrorDomain {
			return true
		}
	}
	return false
}

// target is the API endpoint and token the command uses: flags, else the environment, else the
// CLI config.
func target(c *cli.Context) (*url.URL, string, error) {
	env := config.Env()
	cfg, err := config.LoadCLI(config.DefaultCLIConfigPath(env), env)
	if err != nil {
		return nil, "", err
	}
	if c.IsSet("endpoint") {
		cfg.Endpoint = c.String("endpoint")
	}
	if c.IsSet("token") {
		cfg.Token = c.String("token")
	}
	if cfg.Endpoint == "" {
		return nil, "", errors.New("no API endpoint: run `cocoonbox dev`, or pass --endpoint / set COCOONBOX_ENDPOINT")
	}
	if cfg.Token == "" {
		return nil, "", errors.New("no API token: pass --token or set COCOONBOX_TOKEN")
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, "", fmt.Errorf("endpoint: want http://host:port or https://host, got %q", cfg.Endpoint)
	}
	return u, cfg.Token, nil
}

func dialTarget(u *url.URL, token string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	return grpc.NewClient(u.Host, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearerToken{token: token, secure: u.Scheme == "https"}),
	}, opts...)...)
}

// bearerToken sends the API token on every call.
type bearerToken struct {
	token  string
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so that the loopback dev endpoint works over h2c.
func (b bearerToken) RequireTransportSecurity() bool { return false }
