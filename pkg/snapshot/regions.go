package snapshot

import (
	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// InForce applies the region shares in force that the region rebalancer
// wrote in status to a rule compiled from spec: they replace spec's
// percentages when the rule follows the traffic and status names exactly
// spec's regions, each share valid and their sum at most 100 (less in the
// middle of a change). Anything else (a status of other regions, after
// spec.regions changed; a Fixed rule) leaves spec's split in force. It
// reports whether status's shares were applied.
func (r *Rule) InForce(status []v1alpha1.RegionInForce) bool {
	if !r.FollowsTraffic() || len(status) != len(r.Regions) {
		return false
	}
	shares := make([]RegionShare, len(r.Regions))
	var sum int32
	for i, g := range r.Regions {
		p, ok := percentOf(status, g.Name)
		if !ok || p < 1 || p > 100 || r.Capacity*int64(p) < 100*int64(max(1, r.Shards)) {
			return false
		}
		shares[i] = RegionShare{Name: g.Name, Percent: p}
		sum += p
	}
	if sum > 100 {
		return false
	}
	r.Regions = shares
	return true
}

// percentOf is the percent status gives region.
func percentOf(status []v1alpha1.RegionInForce, region string) (int32, bool) {
	for _, s := range status {
		if s.Name == region {
			return s.Percent, true
		}
	}
	return 0, false
}
