package controllers

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// step advances one rule by one pass and writes its status when it
// changed: the shares, or the demand and when it was heard (kept so that
// a restarted rebalancer carries on from them).
func (r *Rebalancer) step(ctx context.Context, obj *v1alpha1.RateLimitRule, d *demand, now time.Time) error {
	src := ruleSource(obj)
	st := stateOf(obj, now)
	before := st.Split()
	res := regionshares.Step(r.opts.Shares, st, d.of(src, obj.Spec.Regions), now)
	for _, g := range res.State.Regions {
		regionShare.WithLabelValues(src, g.Name).Set(float64(g.Percent))
		regionDemand.WithLabelValues(src, g.Name).Set(g.Demand) // 0 until measured
	}
	orig := obj.DeepCopy()
	writeState(&obj.Status, &res.State)
	if equality.Semantic.DeepEqual(orig.Status, obj.Status) {
		return nil
	}
	if err := r.store.WriteStatus(ctx, obj, orig); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if res.Kind == regionshares.Unchanged {
		return nil
	}
	regionChanges.WithLabelValues(res.Kind.String()).Inc()
	msg := fmt.Sprintf("region shares %s → %s (%s)", before, res.State.Split(), res.Why)
	if res.State.Changing {
		msg += fmt.Sprintf("; the growing regions get theirs once the lowered ones confirm (at most %s)", r.opts.Shares.WithDefaults().ConfirmWithin)
	}
	r.log.Info("region shares", "rule", src, "kind", res.Kind.String(), "message", msg)
	if r.record != nil {
		r.record(obj, "RegionShares"+res.Kind.String(), msg)
	}
	return nil
}

// stateOf is obj's regions as the rebalancer last left them in status,
// or, when status holds none for spec's regions (a new rule, regions
// renamed), spec's split, heard now (so that a silent region's timeout
// starts). Never the static split over status's: a restart resumes.
func stateOf(obj *v1alpha1.RateLimitRule, now time.Time) regionshares.State {
	var st regionshares.State
	inForce := statusMatches(obj)
	shards := int64(1)
	if hk := obj.Spec.HotKey; hk != nil && hk.Shards > 1 {
		shards = int64(hk.Shards)
	}
	least := int32(math.Ceil(float64(100*shards) / float64(max(1, obj.Spec.Capacity))))
	for _, g := range obj.Spec.Regions {
		reg := regionshares.Region{Name: g.Name, Percent: g.Percent, Min: least, LastHeard: now}
		if g.MinPercent != nil {
			reg.Floor = *g.MinPercent
		}
		if inForce {
			s := findRegion(obj.Status.Regions, g.Name)
			reg.Percent = s.Percent
			if d, err := strconv.ParseFloat(s.Demand, 64); err == nil && s.Demand != "" {
				reg.Demand, reg.Known = d, true
			}
			if s.LastHeard != nil {
				reg.LastHeard = s.LastHeard.Time
			}
		}
		st.Regions = append(st.Regions, reg)
	}
	if ch := obj.Status.RegionChange; inForce && ch != nil && len(ch.Target) == len(st.Regions) {
		st.Changing, st.Since = true, ch.Since.Time
		for i := range st.Regions {
			t := findTarget(ch.Target, st.Regions[i].Name)
			st.Regions[i].Target, st.Regions[i].Lowered = t.Percent, t.Lowered
			if t.Percent == 0 {
				st.Changing = false // a target of another set of regions
			}
		}
	}
	return st
}

// statusMatches reports whether status.regions names exactly spec's
// regions (what the snapshot takes, snapshot.Rule.InForce).
func statusMatches(obj *v1alpha1.RateLimitRule) bool {
	if len(obj.Status.Regions) != len(obj.Spec.Regions) {
		return false
	}
	for _, g := range obj.Spec.Regions {
		if findRegion(obj.Status.Regions, g.Name).Name == "" {
			return false
		}
	}
	return true
}

func findRegion(in []v1alpha1.RegionInForce, name string) v1alpha1.RegionInForce {
	for _, s := range in {
		if s.Name == name {
			return s
		}
	}
	return v1alpha1.RegionInForce{}
}

func findTarget(in []v1alpha1.RegionTarget, name string) v1alpha1.RegionTarget {
	for _, t := range in {
		if t.Name == name {
			return t
		}
	}
	return v1alpha1.RegionTarget{}
}

// writeState sets status's rebalancer fields from st. The demand is
// rounded (one decimal) and lastHeard to the second, so that a status is
// written again only when they moved.
func writeState(status *v1alpha1.RateLimitRuleStatus, st *regionshares.State) {
	status.Regions = make([]v1alpha1.RegionInForce, len(st.Regions))
	for i, g := range st.Regions {
		s := v1alpha1.RegionInForce{Name: g.Name, Percent: g.Percent}
		if g.Known {
			s.Demand = regionshares.FormatDemand(g.Demand)
		}
		if !g.LastHeard.IsZero() {
			t := metav1.NewTime(g.LastHeard.Truncate(time.Second))
			s.LastHeard = &t
		}
		status.Regions[i] = s
	}
	status.RegionSplit = st.Split()
	status.RegionChange = nil
	if st.Changing {
		ch := &v1alpha1.RegionChange{Since: metav1.NewMicroTime(st.Since.Truncate(time.Microsecond))}
		for _, g := range st.Regions {
			ch.Target = append(ch.Target, v1alpha1.RegionTarget{Name: g.Name, Percent: g.Target, Lowered: g.Lowered})
		}
		status.RegionChange = ch
	}
}
