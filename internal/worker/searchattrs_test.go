package worker

import (
	"slices"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox/workflows"
)

// TestMissingSearchAttributes: a namespace registered before OwnerName lacks it alone; one with
// an attribute of another type names it with both types.
func TestMissingSearchAttributes(t *testing.T) {
	kw := enumspb.INDEXED_VALUE_TYPE_KEYWORD
	older := map[string]enumspb.IndexedValueType{"Owner": kw, "BoxState": kw, "BoxName": kw, "WorkflowType": kw}
	missing, wrong := MissingSearchAttributes(older, workflows.SearchAttributes)
	if !slices.Equal(missing, []string{"OwnerName"}) || len(wrong) != 0 {
		t.Fatalf("older namespace: missing %v, wrong %v; want OwnerName alone", missing, wrong)
	}
	older["OwnerName"] = enumspb.INDEXED_VALUE_TYPE_TEXT
	missing, wrong = MissingSearchAttributes(older, workflows.SearchAttributes)
	if len(missing) != 0 || !slices.Equal(wrong, []string{"OwnerName is Text, want Keyword"}) {
		t.Fatalf("OwnerName as text: missing %v, wrong %v", missing, wrong)
	}
	older["OwnerName"] = kw
	if missing, wrong = MissingSearchAttributes(older, workflows.SearchAttributes); len(missing)+len(wrong) != 0 {
		t.Fatalf("all there: missing %v, wrong %v", missing, wrong)
	}
}
