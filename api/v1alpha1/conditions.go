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
	// ReasonTenantNotAllowed: the rule's namespace may not declare rules for
	// its tenant (the controller's namespace policy; see
	// AnnotationTenants).
	ReasonTenantNotAllowed = "TenantNotAllowed"
	// ReasonTargetNotFound: spec.targetRef names an HTTPRoute or GRPCRoute (or a rule
	// of it) that does not exist, or the controller does not run in Gateway
	// API mode; the message says which.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonPublishFailed: the rule is accepted, but the controller could not
	// write the snapshot that holds its current spec; the message says why.
	ReasonPublishFailed = "PublishFailed"
	// ReasonExpired: spec.expiresAt has passed; the rule is out of the
	// snapshot until spec.expiresAt moves to a later time or is removed.
	ReasonExpired = "Expired"
	// ReasonExpiryInPast: spec.expiresAt was already past when the rule was
	// created, so it never took effect. The API server cannot compare a
	// time with the present in its validation, so the controller refuses
	// it with this reason.
	ReasonExpiryInPast = "ExpiryInPast"
)

// Namespace annotations of the controller's namespace policy
// (--namespace-policy=labelled, the default). They are set on Namespace
// objects, which namespace administrators cannot normally edit, so they are a
// platform team's control.
const (
	// AnnotationTenants lists, comma-separated, the tenants that
	// RateLimitRules in the namespace may limit; "*" allows every tenant id
	// (but not the wildcard tenant, see AnnotationAllowWildcardTenant).
	AnnotationTenants = "ratelimit.tollgate.dev/tenants"
	// AnnotationAllowWildcardTenant set to "true" lets RateLimitRules in the
	// namespace use tenant "*", which sets limits for every tenant.
	AnnotationAllowWildcardTenant = "ratelimit.tollgate.dev/allow-wildcard-tenant"
)
