package snapshot

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// CompileAt is Compile at the time now, for rules with spec.expiresAt: a
// rule whose expiry is at or before now takes no part, neither in the
// snapshot nor in conflicts (its verdict says Expired, or ExpiryInPast
// when the time had already passed when the object was created), and the
// others compile as Compile compiles them. next is the earliest expiry
// still to come (zero: none): the time at which the snapshot must be
// compiled again. The controller and the file source both compile through
// it, so a temporary rule ends the same way in a cluster and from files.
func CompileAt(items []v1alpha1.RateLimitRule, now time.Time) (rules []Rule, verdicts []Verdict, next time.Time) {
	var expired map[int]Verdict
	for i := range items {
		at, ok := ExpiresAt(&items[i].Spec)
		switch {
		case !ok:
		case !now.Before(at):
			if expired == nil {
				expired = map[int]Verdict{}
			}
			expired[i] = expiredVerdict(&items[i], at)
		case next.IsZero() || at.Before(next):
			next = at
		}
	}
	if len(expired) == 0 {
		rules, verdicts = Compile(items)
		return rules, verdicts, next
	}
	live := make([]v1alpha1.RateLimitRule, 0, len(items)-len(expired))
	index := make([]int, 0, cap(live))
	for i := range items {
		if _, gone := expired[i]; !gone {
			// A shallow copy: the items are only read.
			live = append(live, items[i])
			index = append(index, i)
		}
	}
	rules, liveVerdicts := Compile(live)
	verdicts = make([]Verdict, len(items))
	for i, v := range expired {
		verdicts[i] = v
	}
	for j, v := range liveVerdicts {
		verdicts[index[j]] = v
	}
	return rules, verdicts, next
}

// ExpiresAt is the spec's expiry, and false for a rule without one.
func ExpiresAt(spec *v1alpha1.RateLimitRuleSpec) (time.Time, bool) {
	if spec.ExpiresAt == nil || spec.ExpiresAt.IsZero() {
		return time.Time{}, false
	}
	return spec.ExpiresAt.Time, true
}

// expiredVerdict is the verdict on obj, whose expiry at has passed:
// ExpiryInPast when at was not after the object's creation (it never took
// effect: the refusal the API server cannot make), Expired otherwise
// (objects read from files have no creation time).
func expiredVerdict(obj *v1alpha1.RateLimitRule, at time.Time) Verdict {
	v := Verdict{Reason: v1alpha1.ReasonExpired, Message: fmt.Sprintf(
		"spec.expiresAt %s has passed: the rule is not in force (the object may stay; set a later spec.expiresAt, or remove it, to enforce the rule again)",
		at.UTC().Format(time.RFC3339))}
	if created := obj.CreationTimestamp; !created.IsZero() && !at.After(created.Time) {
		v.Reason = v1alpha1.ReasonExpiryInPast
		v.Message = fmt.Sprintf("spec.expiresAt %s was already past when the rule was created (%s), so the rule never took effect: set a time in the future "+
			"(the API server cannot compare a time with the present, so the controller refuses it)",
			at.UTC().Format(time.RFC3339), created.UTC().Format(time.RFC3339))
	}
	if r, err := FromSpec(&obj.Spec, ""); err == nil {
		v.Rate = v1alpha1.FormatRate(r.RefillTokens, r.Period())
	}
	return v
}
