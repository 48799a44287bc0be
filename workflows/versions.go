package workflows

import "go.temporal.io/sdk/workflow"

// atExplains5 is the version of each change of the box workflow that a run started at version 5
// of versionExplains has. Such a run asks for none of them: each workflow.GetVersion recorded a
// marker and upserted the TemporalChangeVersion search attribute, two history events and a
// visibility write each, two of them in the workflow task of every create and more at a run's
// first hibernate and wake. Never change a value here: a change that needs a newer version of
// one of these asks workflow.GetVersion under a new change ID, or a newer versionExplains
// freezes a new table.
var atExplains5 = map[string]workflow.Version{
	versionViewersBySource:  1,
	versionBackgroundSeal:   1,
	versionRecordedSleep:    1,
	versionLocalStoreWrites: 1,
	versionQuickCalls:       1,
	versionQuickOnNode:      1,
	versionLeaseIdle:        1,
	versionLeaseTellsRuns:   2,
	versionForkElsewhere:    1,
	versionReleaseBehind:    1,
	versionLostFails:        1,
	versionFailedSealSleeps: 1,
}

// version is workflow.GetVersion of changeID (from DefaultVersion to max) for this run: the
// frozen atExplains5 one in a run that started at version 5 of versionExplains.
func (w *box) version(ctx workflow.Context, changeID string, max workflow.Version) workflow.Version {
	if v, ok := atExplains5[changeID]; ok && w.current {
		return v
	}
	return workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, max)
}
