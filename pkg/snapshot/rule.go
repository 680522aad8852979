package snapshot

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// Rule is one compiled limit. Field names are short because 100,000 of them
// are stored.
type Rule struct {
	// Tenant is a tenant id or "*".
	Tenant string `json:"t"`
	// Route is a route id or "*".
	Route string `json:"r"`
	// Capacity is the bucket size (burst).
	Capacity int64 `json:"c"`
	// RefillTokens tokens are added every RefillPeriodMs milliseconds.
	RefillTokens int64 `json:"n"`
	// RefillPeriodMs is the refill period in milliseconds.
	RefillPeriodMs int64 `json:"p"`
	// Shadow rules never reject; they only report what they would reject.
	Shadow bool `json:"sh,omitempty"`
	// FailureMode is what to do when Redis cannot decide.
	FailureMode FailureMode `json:"f,omitempty"`
	// Source names the RateLimitRule this was compiled from ("namespace/name");
	// empty for built-in rules.
	Source string `json:"s,omitempty"`
}

// FailureMode is the compiled spec.failureMode.
type FailureMode uint8

const (
	// LocalFallback limits locally with the rule divided by the replica count.
	LocalFallback FailureMode = iota
	// FailOpen admits every request.
	FailOpen
	// FailClosed rejects every request.
	FailClosed
)

func (f FailureMode) String() string {
	switch f {
	case LocalFallback:
		return "LocalFallback"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(f))
}

// Limits on compiled values; they match the CRD schema.
const (
	MaxCapacity     = 1_000_000_000
	MaxRefillTokens = 1_000_000_000
	MinPeriodMs     = 1_000
	MaxPeriodMs     = 168 * 3600 * 1000
)

// Validate checks a rule read from an untrusted source (a ConfigMap anyone
// with write access could have edited, a manifest file).
func (r *Rule) Validate() error {
	switch {
	case !v1alpha1.ValidSelector(r.Tenant):
		return fmt.Errorf("tenant %q is not a valid id or %q", clip(r.Tenant), v1alpha1.Wildcard)
	case !v1alpha1.ValidSelector(r.Route):
		return fmt.Errorf("route %q is not a valid id or %q", clip(r.Route), v1alpha1.Wildcard)
	case r.Capacity < 1 || r.Capacity > MaxCapacity:
		return fmt.Errorf("rule %s/%s: capacity %d out of range [1, %d]", r.Tenant, r.Route, r.Capacity, MaxCapacity)
	case r.RefillTokens < 1 || r.RefillTokens > MaxRefillTokens:
		return fmt.Errorf("rule %s/%s: refill tokens %d out of range [1, %d]", r.Tenant, r.Route, r.RefillTokens, MaxRefillTokens)
	case r.RefillPeriodMs < MinPeriodMs || r.RefillPeriodMs > MaxPeriodMs:
		return fmt.Errorf("rule %s/%s: refill period %dms out of range [%d, %d]", r.Tenant, r.Route, r.RefillPeriodMs, MinPeriodMs, MaxPeriodMs)
	case r.FailureMode > FailClosed:
		return fmt.Errorf("rule %s/%s: unknown failure mode %d", r.Tenant, r.Route, r.FailureMode)
	}
	return nil
}

// RatePerSecond is the refill rate in tokens per second.
func (r *Rule) RatePerSecond() float64 {
	return float64(r.RefillTokens) * 1000 / float64(r.RefillPeriodMs)
}

// Period is the refill period.
func (r *Rule) Period() time.Duration {
	return time.Duration(r.RefillPeriodMs) * time.Millisecond
}

// FromSpec compiles a RateLimitRule's spec. source names the object.
func FromSpec(spec *v1alpha1.RateLimitRuleSpec, source string) (Rule, error) {
	tokens, period, ok := spec.RefillRate()
	if !ok {
		return Rule{}, fmt.Errorf("%s: exactly one of spec.refillPerSecond and spec.refill must be set", source)
	}
	r := Rule{
		Tenant:         spec.Tenant,
		Route:          spec.Route,
		Capacity:       spec.Capacity,
		RefillTokens:   tokens,
		RefillPeriodMs: period.Milliseconds(),
		Source:         source,
	}
	switch spec.Mode {
	case "", v1alpha1.ModeEnforce:
	case v1alpha1.ModeShadow:
		r.Shadow = true
	default:
		return Rule{}, fmt.Errorf("%s: spec.mode %q: want Enforce or Shadow", source, spec.Mode)
	}
	switch spec.FailureMode {
	case "", v1alpha1.FailureLocalFallback:
	case v1alpha1.FailureOpen:
		r.FailureMode = FailOpen
	case v1alpha1.FailureClosed:
		r.FailureMode = FailClosed
	default:
		return Rule{}, fmt.Errorf("%s: spec.failureMode %q: want LocalFallback, FailOpen or FailClosed", source, spec.FailureMode)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("%s: %w", source, err)
	}
	return r, nil
}

// clip shortens untrusted text before it goes into an error message.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
