package snapshot

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

func TestCompileAt(t *testing.T) {
	t0 := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	obj := func(name, tenant string, created time.Time, expires *time.Time, capacity int64) v1alpha1.RateLimitRule {
		o := v1alpha1.RateLimitRule{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec:       v1alpha1.RateLimitRuleSpec{Tenant: tenant, Route: "create-order", Capacity: capacity, RefillPerSecond: ptr.To[int64](10)},
		}
		if expires != nil {
			o.Spec.ExpiresAt = &metav1.Time{Time: *expires}
		}
		return o
	}
	in := func(d time.Duration) *time.Time { return ptr.To(t0.Add(d)) }
	items := []v1alpha1.RateLimitRule{
		obj("default", "*", t0.Add(-time.Hour), nil, 20),
		// The boost: a tenant's rule beats the "*" default until it expires.
		obj("boost", "shop-a", t0.Add(-time.Minute), in(time.Hour), 500),
		// Two rules of one tenant and route: the older wins while it lasts,
		// then the other takes over.
		obj("older-temporary", "shop-b", t0.Add(-2*time.Hour), in(30*time.Minute), 300),
		obj("newer-permanent", "shop-b", t0.Add(-time.Hour), nil, 30),
		// Created after its expiry: never in force.
		obj("typo", "shop-c", t0.Add(-time.Minute), in(-time.Hour), 900),
	}
	cases := []struct {
		name     string
		now      time.Time
		capacity map[string]int64  // tenant -> capacity of the rule in force for it
		reasons  map[string]string // object name -> verdict reason ("" accepted)
		next     time.Time
	}{
		{"before the first expiry", t0,
			map[string]int64{"shop-a": 500, "shop-b": 300, "shop-c": 20},
			map[string]string{"default": "", "boost": "", "older-temporary": "", "newer-permanent": v1alpha1.ReasonConflict, "typo": v1alpha1.ReasonExpiryInPast},
			t0.Add(30 * time.Minute)},
		{"at the first expiry: the permanent rule takes over", t0.Add(30 * time.Minute),
			map[string]int64{"shop-a": 500, "shop-b": 30, "shop-c": 20},
			map[string]string{"default": "", "boost": "", "older-temporary": v1alpha1.ReasonExpired, "newer-permanent": "", "typo": v1alpha1.ReasonExpiryInPast},
			t0.Add(time.Hour)},
		{"after both: the default is back for the boosted tenant", t0.Add(2 * time.Hour),
			map[string]int64{"shop-a": 20, "shop-b": 30, "shop-c": 20},
			map[string]string{"default": "", "boost": v1alpha1.ReasonExpired, "older-temporary": v1alpha1.ReasonExpired, "newer-permanent": "", "typo": v1alpha1.ReasonExpiryInPast},
			time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules, verdicts, next := CompileAt(items, c.now)
			if !next.Equal(c.next) {
				t.Errorf("next = %v, want %v", next, c.next)
			}
			set := Build(rules, 1)
			for tenant, want := range c.capacity {
				if got := set.Lookup(tenant, "create-order"); got == nil || got.Capacity != want {
					t.Errorf("%s: rule in force %+v, want capacity %d", tenant, got, want)
				}
			}
			for i, v := range verdicts {
				name := items[i].Name
				if want := c.reasons[name]; v.Accepted != (want == "") || v.Reason != want {
					t.Errorf("%s: verdict %+v, want reason %q", name, v, want)
				}
				if v.Rate != "10/s" {
					t.Errorf("%s: rate %q, want 10/s (status.rate is kept for expired rules)", name, v.Rate)
				}
			}
		})
	}
	_, verdicts, _ := CompileAt(items, t0.Add(2*time.Hour))
	if msg := verdicts[1].Message; !strings.Contains(msg, "spec.expiresAt 2025-07-01T13:00:00Z has passed") {
		t.Errorf("Expired message %q", msg)
	}
	if msg := verdicts[4].Message; !strings.Contains(msg, "already past when the rule was created (2025-07-01T11:59:00Z)") {
		t.Errorf("ExpiryInPast message %q", msg)
	}
}

// TestCompileAtFromFiles: objects without a creation time (manifest files)
// expire with reason Expired, never ExpiryInPast, and compile exactly as
// Compile compiles them when nothing has expired.
func TestCompileAtFromFiles(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	items := []v1alpha1.RateLimitRule{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"},
			Spec: v1alpha1.RateLimitRuleSpec{Tenant: "a", Route: "r", Capacity: 5, RefillPerSecond: ptr.To[int64](1), ExpiresAt: &metav1.Time{Time: now.Add(-time.Second)}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"},
			Spec: v1alpha1.RateLimitRuleSpec{Tenant: "b", Route: "r", Capacity: 5, RefillPerSecond: ptr.To[int64](1)}},
	}
	rules, verdicts, next := CompileAt(items, now)
	if len(rules) != 1 || rules[0].Tenant != "b" || !next.IsZero() {
		t.Fatalf("rules %+v, next %v", rules, next)
	}
	if verdicts[0].Reason != v1alpha1.ReasonExpired || !verdicts[1].Accepted {
		t.Errorf("verdicts %+v", verdicts)
	}
	want, _ := Compile(items[1:])
	got, _, _ := CompileAt(items[1:], now)
	if len(got) != 1 || got[0].Source != want[0].Source || got[0].Capacity != want[0].Capacity {
		t.Errorf("CompileAt without expiries = %+v, Compile = %+v", got, want)
	}
}
