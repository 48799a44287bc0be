package cocoonbox

// AttemptsState is where a best-of-N agent run is: its attempts running on forks of a box, the
// judge picking one, the pick waiting for its user, and how it ended.
type AttemptsState = string

// Attempts states.
const (
	AttemptsRunning   AttemptsState = "running"
	AttemptsJudging   AttemptsState = "judging"
	AttemptsJudged    AttemptsState = "judged" // the judge picked; waiting for the user to accept it or choose another
	AttemptsAccepting AttemptsState = "accepting"
	AttemptsAccepted  AttemptsState = "accepted"
	AttemptsFailed    AttemptsState = "failed"
	AttemptsDiscarded AttemptsState = "discarded"
)
