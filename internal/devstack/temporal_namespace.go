package devstack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loomhand/cocoonbox/internal/worker"
)

// register waits for the frontend and makes the namespace and search attributes match the
// options. Every step tolerates what an earlier start left behind, so restarts are no-ops.
func (t *Temporal) register(ctx context.Context) error {
	if err := retry(ctx, func() error { return t.checkHealth(ctx) }); err != nil {
		return fmt.Errorf("wait for temporal frontend at %s: %w", t.addr, err)
	}
	if err := retry(ctx, func() error { return t.registerNamespace(ctx) }); err != nil {
		return fmt.Errorf("register namespace %s: %w", t.opts.Namespace, err)
	}
	added := false
	if len(t.opts.SearchAttributes) > 0 {
		err := retry(ctx, func() error {
			// A try that failed may have added them all the same.
			a, err := t.registerSearchAttributes(ctx)
			added = added || a || err != nil
			return err
		})
		if err != nil {
			return fmt.Errorf("register search attributes: %w", err)
		}
	}
	t.searchAttributesSettled(added)
	return nil
}

func (t *Temporal) registerNamespace(ctx context.Context) error {
	wf := workflowservice.NewWorkflowServiceClient(t.conn)
	retention := durationpb.New(t.opts.Retention)
	_, err := wf.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        t.opts.Namespace,
		Description:                      "registered by cocoonbox dev",
		WorkflowExecutionRetentionPeriod: retention,
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if !errors.As(serviceError(err), &exists) {
		return err
	}
	desc, err := wf.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: t.opts.Namespace})
	if err != nil {
		return err
	}
	if desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration() == t.opts.Retention {
		return nil
	}
	_, err = wf.UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: t.opts.Namespace,
		Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: retention},
	})
	return err
}

// registerSearchAttributes adds the search attributes the namespace lacks, saying whether
// there were any.
func (t *Temporal) registerSearchAttributes(ctx context.Context) (added bool, err error) {
	list, err := t.operator().ListSearchAttributes(ctx,
		&operatorservice.ListSearchAttributesRequest{Namespace: t.opts.Namespace})
	if err != nil {
		return false, err
	}
	have := maps.Clone(list.GetSystemAttributes())
	maps.Copy(have, list.GetCustomAttributes())
	names, wrong := worker.MissingSearchAttributes(have, t.opts.SearchAttributes)
	if len(wrong) > 0 {
		return false, permanent(fmt.Errorf("search attributes of the wrong type: %s", strings.Join(wrong, ", ")))
	}
	if len(names) == 0 {
		return false, nil
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range names {
		missing[name] = t.opts.SearchAttributes[name]
	}
	_, err = t.operator().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        t.opts.Namespace,
		SearchAttributes: missing,
	})
	return err == nil, err
}

// permanentError stops retry: the condition will not change by waiting.
type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

func permanent(err error) error { return permanentError{err} }

// retry calls f until it succeeds, fails for good or ctx ends. Unavailable and NotFound
// errors are expected while the services and the namespace cache warm up.
func retry(ctx context.Context, f func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		var p permanentError
		if errors.As(err, &p) {
			return p.error
		}
		if !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// serviceError turns a gRPC status error into Temporal's typed error (found from the status
// details), since these raw clients skip the SDK's conversion.
func serviceError(err error) error {
	if s, ok := status.FromError(err); ok && s != nil {
		return serviceerror.FromStatus(s)
	}
	return err
}

func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.NotFound, codes.ResourceExhausted, codes.DeadlineExceeded:
		return true
	}
	return false
}
