package main

import (
	"fmt"
	"strings"
)

// ruleSpec is one RateLimitRule for the gateway's --rules file.
type ruleSpec struct {
	name      string
	tenant    string
	route     string
	capacity  int64
	perSecond int64
	prefetch  bool // hotKey: {prefetch: Auto}
	// extra is more of the spec, as YAML indented by two spaces.
	extra string
}

func (r ruleSpec) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRule\nmetadata:\n  name: %s\nspec:\n", r.name)
	fmt.Fprintf(&b, "  tenant: %q\n  route: %q\n  capacity: %d\n  refillPerSecond: %d\n", r.tenant, r.route, r.capacity, r.perSecond)
	if r.prefetch {
		b.WriteString("  hotKey:\n    prefetch: Auto\n")
	}
	b.WriteString(r.extra)
	return b.String()
}

func (r ruleSpec) String() string {
	s := fmt.Sprintf("%s/%s: capacity %d, %d/s", r.tenant, r.route, r.capacity, r.perSecond)
	if r.prefetch {
		s += ", hotKey prefetch Auto"
	}
	return s
}

func manifests(rules ...ruleSpec) string {
	var parts []string
	for _, r := range rules {
		parts = append(parts, r.yaml())
	}
	return strings.Join(parts, "---\n")
}

// generousRule admits the whole load of scenarios 1-3: every tenant's
// bucket holds more than it is sent, so every request is a real decision
// that is then proxied (a rejected request would be cheaper and flatter
// the figures). With prefetch Auto its batch is min(1000, 5% of 20,000).
func generousRule(prefetch bool) ruleSpec {
	return ruleSpec{name: "bench-all", tenant: "*", route: "*", capacity: 20000, perSecond: 10000, prefetch: prefetch}
}

// limiterMode is one way of running the gateway's limiter.
type limiterMode struct {
	name     string
	flags    []string
	prefetch bool
	redis    bool
}

var limiterModes = []limiterMode{
	{name: "classic", flags: []string{"--redis-batching=false", "--empty-bucket-cache=false"}, redis: true},
	{name: "batched", redis: true},
	{name: "prefetch", prefetch: true, redis: true},
	{name: "local", flags: []string{"--limiter=local"}},
}

func (m limiterMode) describe() string {
	s := strings.Join(m.flags, " ")
	if m.prefetch {
		s = strings.TrimSpace(s + " rule hotKey.prefetch=Auto")
	}
	if s == "" {
		s = "defaults (--redis-batching=true)"
	}
	return s
}
