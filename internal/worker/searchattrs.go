package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox/workflows"
)

// CheckSearchAttributes refuses a namespace that lacks one of the box workflows' search
// attributes (workflows.SearchAttributes) or has one of another type: every workflow task of a
// box that upserts it would fail, so the worker says so at start, naming them and the command
// that registers them, rather than leave boxes stuck. A namespace the worker may not list (a
// credential without that right) is logged and trusted.
func CheckSearchAttributes(ctx context.Context, c client.Client, namespace string, logger *slog.Logger) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		logger.Warn("could not list the namespace's search attributes; assuming they are registered", "namespace", namespace, "err", err)
		return nil
	}
	have := maps.Clone(list.GetSystemAttributes())
	maps.Copy(have, list.GetCustomAttributes())
	missing, wrong := MissingSearchAttributes(have, workflows.SearchAttributes)
	if len(wrong) > 0 {
		return fmt.Errorf("temporal namespace %s: search attributes of the wrong type: %s", namespace, strings.Join(wrong, ", "))
	}
	if len(missing) == 0 {
		return nil
	}
	var flags []string
	for _, name := range missing {
		flags = append(flags, "--name "+name+" --type Keyword")
	}
	return fmt.Errorf("temporal namespace %s lacks the search attributes %s: register them once with `temporal operator search-attribute create --namespace %s %s`",
		namespace, strings.Join(missing, ", "), namespace, strings.Join(flags, " "))
}

// MissingSearchAttributes compares the search attributes a namespace has with those wanted: the
// names it lacks, and those it has with another type (as "NAME is TYPE, want TYPE"), sorted.
func MissingSearchAttributes(have, want map[string]enumspb.IndexedValueType) (missing, wrongType []string) {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, ok := have[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case got != want[name]:
			wrongType = append(wrongType, fmt.Sprintf("%s is %s, want %s", name, got, want[name]))
		}
	}
	return missing, wrongType
}
