package v1alpha1

// Condition types of a RateLimitRule.
const (
	// ConditionAccepted is True when the rule is valid and is the one rule that
	// limits its tenant+route.
	ConditionAccepted = "Accepted"
	// ConditionProgrammed is True when the rule's current spec is in the
	// published rule snapshot that gateways load.
	ConditionProgrammed = "Programmed"
	// ConditionReady is True when the rule is both Accepted and Programmed.
	ConditionReady = "Ready"
)

// Condition reasons of a RateLimitRule.
const (
	// ReasonAccepted: the rule is the one in force for its tenant+route.
	ReasonAccepted = "Accepted"
	// ReasonConflict: an older rule already limits the same tenant+route.
	ReasonConflict = "Conflict"
	// ReasonPublished: the rule is in the published snapshot.
	ReasonPublished = "Published"
	// ReasonNotPublished: the rule is not in the snapshot because it was not
	// accepted.
	ReasonNotPublished = "NotPublished"
	// ReasonReady: accepted and published.
	ReasonReady = "Ready"
)
