package snapshot

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// TestInForce: the shares the rebalancer wrote in status replace spec's
// split only when they name exactly spec's regions, each valid, adding up
// to at most 100; a Fixed rule keeps spec's.
func TestInForce(t *testing.T) {
	split := func() Rule {
		return Rule{Tenant: "t", Route: "r", Capacity: 100, RefillTokens: 10, RefillPeriodMs: 1000,
			Regions: []RegionShare{{"eu", 50}, {"us", 50}}}
	}
	st := func(eu, us int32) []v1alpha1.RegionInForce {
		return []v1alpha1.RegionInForce{{Name: "eu", Percent: eu}, {Name: "us", Percent: us}}
	}
	cases := []struct {
		name   string
		rule   func() Rule
		status []v1alpha1.RegionInForce
		want   []RegionShare // nil: spec's
	}{
		{"shares in force", split, st(70, 30), []RegionShare{{"eu", 70}, {"us", 30}}},
		{"mid-change, under 100", split, st(50, 30), []RegionShare{{"eu", 50}, {"us", 30}}},
		{"over 100", split, st(70, 50), nil},
		{"a share of 0", split, st(100, 0), nil},
		{"other regions", split, []v1alpha1.RegionInForce{{Name: "eu", Percent: 70}, {Name: "ap", Percent: 30}}, nil},
		{"fewer regions", split, []v1alpha1.RegionInForce{{Name: "eu", Percent: 70}}, nil},
		{"no status", split, nil, nil},
		{"fixed", func() Rule { r := split(); r.RegionsFixed = true; return r }, st(70, 30), nil},
		{"below one token", func() Rule { r := split(); r.Capacity = 10; return r }, st(95, 5), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.rule()
			applied := r.InForce(c.status)
			want := c.want
			if want == nil {
				want = c.rule().Regions
			}
			if applied != (c.want != nil) || !reflect.DeepEqual(r.Regions, want) {
				t.Fatalf("InForce: %v, regions %v; want %v, %v", applied, r.Regions, c.want != nil, want)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("the rule in force does not validate: %v", err)
			}
		})
	}
	over := split()
	over.Regions = []RegionShare{{"eu", 70}, {"us", 50}}
	if err := over.Validate(); err == nil || !strings.Contains(err.Error(), "more than 100") {
		t.Fatalf("shares adding up to 120 in a snapshot: %v, want refused", err)
	}
}

// TestFollowsTraffic: shares follow the traffic (gateways record demand,
// the rebalancer moves them) only for a rule split between two regions or
// more and not Fixed; the controller's rebalancer asks the same of the
// RateLimitRule.
func TestFollowsTraffic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		regions []RegionShare
		fixed   bool
		want    bool
	}{
		{"not split", nil, false, false},
		{"one region holds all", []RegionShare{{"eu", 100}}, false, false},
		{"two regions", []RegionShare{{"eu", 50}, {"us", 50}}, false, true},
		{"two regions, Fixed", []RegionShare{{"eu", 50}, {"us", 50}}, true, false},
	} {
		r := Rule{Regions: tc.regions, RegionsFixed: tc.fixed}
		if got := r.FollowsTraffic(); got != tc.want {
			t.Errorf("%s: FollowsTraffic %v, want %v", tc.name, got, tc.want)
		}
	}
}
