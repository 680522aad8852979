package explain

import (
	"context"
	"net/netip"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Limit is one of the limits that stack for a request (spec.by,
// spec.shared): the rule in force of its kind, its bucket and its state.
type Limit struct {
	// Kind is the rule's key shape ("" for tenant and route, the
	// default; "shared"; or its key parts, "address/32/64").
	Kind string `json:"kind"`
	// Name is the limit's name in the RateLimit-Policy header.
	Name   string `json:"name"`
	Source string `json:"source,omitempty"`
	Tenant string `json:"tenant"`
	Route  string `json:"route"`
	// Key is the bucket's name in Redis (a header, path or claim part as
	// a digest: explain sees no request, so those parts are the value of
	// a request without them).
	Key             string      `json:"key"`
	Capacity        float64     `json:"capacity"`
	RefillPerSecond float64     `json:"refillPerSecond"`
	Redis           *RedisState `json:"redis,omitempty"`
	// Binds: a request now would be decided by this limit (the one with
	// the fewest tokens left).
	Binds bool `json:"binds"`
}

// stackedLimits are the limits of tenant on route from address (the zero
// Addr: unknown) when rules of other kinds apply too; nil when the rule in
// force alone decides.
func stackedLimits(ctx context.Context, src Source, rule *snapshot.Rule, tenant, route string, addr netip.Addr) []Limit {
	limits, err := src.Engine.Limits(decision.Request{Tenant: tenant, Route: route, Addr: addr}, rule)
	if err != nil || limits == nil {
		return nil
	}
	out := make([]Limit, 0, len(limits))
	fewest := -1
	left := 0.0
	for i, l := range limits {
		b := src.Engine.LimitBucket(l)
		lim := Limit{Kind: l.Rule.Kind(), Name: l.Name, Source: l.Rule.Source, Tenant: l.Rule.Tenant, Route: l.Rule.Route,
			Key: b.Key, Capacity: b.Capacity, RefillPerSecond: perSecond(b)}
		tokens := b.Capacity
		if src.Redis != nil {
			st := ReadBucket(ctx, src.Redis, b)
			lim.Redis, tokens = &st, st.Tokens
		}
		if fewest < 0 || tokens < left {
			fewest, left = i, tokens
		}
		out = append(out, lim)
	}
	out[fewest].Binds = true
	return out
}
