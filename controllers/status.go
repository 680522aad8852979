package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// desiredStatus computes the status a rule should have given its state after
// the last publish. It starts from the current status so that unchanged
// conditions keep their lastTransitionTime, and it keeps a publishedVersion
// that still describes the current generation (after a controller restart the
// shard may carry a later version for other rules' changes).
func desiredStatus(obj *v1alpha1.RateLimitRule, st ruleState, snapshotRef string) v1alpha1.RateLimitRuleStatus {
	cur := obj.Status
	out := v1alpha1.RateLimitRuleStatus{
		ObservedGeneration: obj.Generation,
		Rate:               st.Rate,
		Conditions:         append([]metav1.Condition(nil), cur.Conditions...),
		// The region rebalancer's fields are its own: kept as they are.
		Regions:      cur.Regions,
		RegionSplit:  cur.RegionSplit,
		RegionChange: cur.RegionChange,
	}
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&out.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: obj.Generation,
		})
	}

	if !st.Accepted {
		set(v1alpha1.ConditionAccepted, false, st.Reason, st.Message)
		set(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonNotPublished, "the rule is not accepted, so it is not in the snapshot")
		set(v1alpha1.ConditionReady, false, st.Reason, st.Message)
		return out
	}

	if st.PublishError != "" {
		set(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, "the rule is in force for its tenant and route")
		msg := "the snapshot could not be published: " + st.PublishError
		set(v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPublishFailed, msg)
		set(v1alpha1.ConditionReady, false, v1alpha1.ReasonPublishFailed, msg)
		return out
	}
	out.PublishedVersion = st.PublishedVersion
	if cur.ObservedGeneration == obj.Generation && cur.PublishedVersion > 0 && cur.PublishedVersion <= st.PublishedVersion &&
		meta.IsStatusConditionTrue(cur.Conditions, v1alpha1.ConditionProgrammed) {
		out.PublishedVersion = cur.PublishedVersion
	}
	set(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, "the rule is in force for its tenant and route")
	set(v1alpha1.ConditionProgrammed, true, v1alpha1.ReasonPublished,
		fmt.Sprintf("published in snapshot version %d (%s)", out.PublishedVersion, snapshotRef))
	set(v1alpha1.ConditionReady, true, v1alpha1.ReasonReady, "accepted and published")
	return out
}

// statusEqual reports whether two statuses say the same thing, ignoring
// condition order.
func statusEqual(a, b *v1alpha1.RateLimitRuleStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Rate != b.Rate || a.PublishedVersion != b.PublishedVersion ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range a.Conditions {
		d := meta.FindStatusCondition(b.Conditions, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message ||
			d.ObservedGeneration != c.ObservedGeneration || !d.LastTransitionTime.Equal(&c.LastTransitionTime) {
			return false
		}
	}
	return true
}
