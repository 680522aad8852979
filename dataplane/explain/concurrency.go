package explain

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
)

// Concurrency is the rule's concurrency limit (spec.concurrency) as this
// gateway enforces it. The HTTP proxy enforces it; the Envoy rate limit
// service does not.
type Concurrency struct {
	// Key is the Redis sorted set of the slots.
	Key string `json:"key"`
	// MaxInFlight is the cap here: the rule's, or its region's share.
	MaxInFlight  int64   `json:"maxInFlight"`
	LeaseSeconds float64 `json:"leaseSeconds"`
	// Held is the number of slots held now in Redis (leases not yet
	// expired, by Redis's clock); nil with --limiter=local or when Redis
	// could not be read (Error).
	Held  *int64 `json:"held,omitempty"`
	Error string `json:"error,omitempty"`
}

// heldSlots counts the slots of KEYS[1] whose lease has not expired. It
// runs with EVAL_RO: Redis refuses any write from it.
var heldSlots = redis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')`)

// concurrencyOf describes plan's concurrency limit for tenant on route; nil
// when the rule has none.
func concurrencyOf(ctx context.Context, src Source, plan decision.Plan, tenant, route string) *Concurrency {
	limit := plan.Rule.InFlightLimit(plan.Region)
	if limit == 0 {
		return nil
	}
	c := &Concurrency{Key: concurrency.Key(tenant, route), MaxInFlight: limit, LeaseSeconds: plan.Rule.Lease().Seconds()}
	if plan.Region != "" {
		c.Key = concurrency.RegionKey(tenant, route, plan.Region)
	}
	if src.Redis == nil {
		return c
	}
	n, err := heldSlots.RunRO(ctx, src.Redis, []string{c.Key}).Int64()
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Held = &n
	return c
}

// concurrency prints the concurrency limit, if any.
func (t *text) concurrency(r Report) {
	c := r.Concurrency
	if c == nil {
		return
	}
	held := "not counted (--limiter=local)"
	switch {
	case c.Error != "":
		held = "unknown (" + c.Error + ")"
	case c.Held != nil:
		held = strconv.FormatInt(*c.Held, 10) + " held now"
	}
	t.p("concurrency:    at most %d in flight (HTTP proxy only), lease %ss", c.MaxInFlight, num(c.LeaseSeconds))
	t.p("  %s  %s", c.Key, held)
	t.p("")
}
