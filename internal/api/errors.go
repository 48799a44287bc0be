package api

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
)

// grpcCodes maps domain error codes to gRPC codes.
var grpcCodes = map[string]codes.Code{
	cocoonbox.EInvalid:       codes.InvalidArgument,
	cocoonbox.ENotFound:      codes.NotFound,
	cocoonbox.EConflict:      codes.FailedPrecondition,
	cocoonbox.EUnauthorized:  codes.Unauthenticated,
	cocoonbox.EForbidden:     codes.PermissionDenied,
	cocoonbox.EUnavailable:   codes.Unavailable,
	cocoonbox.ENoCapacity:    codes.ResourceExhausted,
	cocoonbox.EUnimplemented: codes.Unimplemented,
	cocoonbox.ECorrupt:       codes.DataLoss,
	cocoonbox.EInternal:      codes.Internal,

	cocoonbox.EResourceExhausted: codes.ResourceExhausted,
}

// ErrorDomain and ReasonDependencyUnavailable are the ErrorInfo detail of an unavailable
// answer from the API: a dependency behind it (PostgreSQL, S3, Temporal, the engine) is down.
const (
	ErrorDomain                 = "cocoonbox"
	ReasonDependencyUnavailable = "DEPENDENCY_UNAVAILABLE"
)

// toStatus turns any error from the service layer into the gRPC status a client sees. Internal
// errors are logged in full and reach the client as "internal error".
func toStatus(ctx context.Context, log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isDomain(err) {
		return err // already a status (e.g. from an interceptor)
	}
	if done := ctx.Err(); done != nil && errors.Is(err, done) {
		// The caller hung up, or its deadline passed: nothing failed here, so nothing is
		// logged as an error, and the code says which it was.
		return status.FromContextError(done).Err()
	}
	code := cocoonbox.ErrorCode(err)
	if code == cocoonbox.EInternal {
		log.ErrorContext(ctx, "internal error", "method", method, "err", err)
	}
	c, ok := grpcCodes[code]
	if !ok {
		c = codes.Unknown
	}
	st := status.New(c, cocoonbox.ErrorMessage(err))
	if field := cocoonbox.ErrorField(err); field != "" && code == cocoonbox.EInvalid {
		// The detail names the field for a client that points at it (a form, a flag).
		if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: field, Description: st.Message()},
		}}); derr == nil {
			st = d
		}
	}
	if code == cocoonbox.EUnavailable {
		// The detail says the API answered and what it depends on did not, which a client
		// tells apart from the API itself not answering (a transport error, worth sending again).
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonDependencyUnavailable, Domain: ErrorDomain}); derr == nil {
			st = d
		}
	}
	if code == cocoonbox.EResourceExhausted {
		// The detail tells a quota apart from an engine out of capacity, which shares the gRPC
		// code but is worth retrying.
		if d, derr := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
			{Subject: "user", Description: st.Message()},
		}}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

func isDomain(err error) bool {
	var e *cocoonbox.Error
	return errors.As(err, &e)
}
