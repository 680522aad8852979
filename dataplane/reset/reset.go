// Package reset sets a tenant's bucket on a route, or its calendar quota's
// count for the current period, to full or to a number of tokens in Redis
// ("we charged them twice by mistake"), for every key the bucket uses on
// this gateway: its region's share, each shard. Each key is set by one
// atomic script call (lua/reset.lua) that reads Redis's clock, so each
// hash slot changes at once; the keys of a sharded bucket live in
// different slots and are set one after the other. The admin listener's
// POST /debug/reset calls it; `tollgate reset` asks one gateway per region.
package reset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/lua"
)

var script = redis.NewScript(lua.Reset)

// Part is what a reset sets.
type Part string

const (
	// PartBucket is the token bucket.
	PartBucket Part = "bucket"
	// PartQuota is the calendar quota's count for the period that holds
	// Redis's time.
	PartQuota Part = "quota"
)

// MaxTokens bounds Request.Tokens (the largest quota).
const MaxTokens = 1_000_000_000_000

// Request says what to set.
type Request struct {
	Part Part
	// Tokens is what to leave for the whole rule: tokens in the bucket, or
	// left in the quota's period. A region's bucket gets its share of it,
	// as of the capacity; shards split it as they split the capacity. nil:
	// full (the capacity, or the whole quota).
	Tokens *int64
}

// Result is what a reset did on one gateway.
type Result struct {
	Part Part `json:"part"`
	// Source is the rule in force (namespace/name, or the built-in
	// default).
	Source string `json:"source"`
	// Region is the gateway's region when the rule gives it a share.
	Region        string `json:"region,omitempty"`
	RegionPercent int32  `json:"regionPercent,omitempty"`
	// Capacity is the whole of what this gateway's keys hold when full:
	// the bucket's capacity (the region's share), or the quota's limit.
	Capacity float64 `json:"capacity"`
	// Before and After add up the keys: tokens held (refilled to Redis's
	// clock; negative in debt) or left in the quota's period.
	Before float64 `json:"before"`
	After  float64 `json:"after"`
	Keys   []Key   `json:"keys"`
}

// Key is one key set.
type Key struct {
	// Key is the bucket's key (see limiter.Storage for where it lives),
	// or the quota's base key.
	Key      string  `json:"key"`
	Shard    *int    `json:"shard,omitempty"`
	Capacity float64 `json:"capacity"`
	Before   float64 `json:"before"`
	After    float64 `json:"after"`
	// Error is why the key could not be set; Before and After are then
	// unknown.
	Error string `json:"error,omitempty"`
}

// Validate checks req against the plan of the rule in force; the error
// names the field (tokens, part) and quotes nothing but numbers and the
// rule's name.
func Validate(plan decision.Plan, req Request) error {
	rule := plan.Rule
	switch req.Part {
	case PartBucket:
		if req.Tokens != nil && *req.Tokens > rule.Capacity {
			return fmt.Errorf("tokens: %d is more than the capacity %d of the rule in force (%s)", *req.Tokens, rule.Capacity, rule.Source)
		}
	case PartQuota:
		if !rule.HasQuota() {
			return fmt.Errorf("part: the rule in force (%s) has no spec.quota", rule.Source)
		}
		if req.Tokens != nil && *req.Tokens > rule.QuotaLimit {
			return fmt.Errorf("tokens: %d is more than the quota %d of the rule in force (%s)", *req.Tokens, rule.QuotaLimit, rule.Source)
		}
	default:
		return fmt.Errorf("part: want bucket or quota")
	}
	if req.Tokens != nil && *req.Tokens < 0 {
		return fmt.Errorf("tokens: want 0 or more")
	}
	return nil
}

// Do sets what req says for every key of plan (Validate first) with one
// script call per key, in layout. A key that fails does not stop the
// others: its Error says why, and Do returns an error too.
func Do(ctx context.Context, c redis.UniversalClient, plan decision.Plan, req Request, layout limiter.Layout) (Result, error) {
	buckets := plan.Shards
	if len(buckets) == 0 {
		buckets = []limiter.Bucket{plan.Bucket}
	}
	res := Result{Part: req.Part, Source: plan.Rule.Source, Region: plan.Region, RegionPercent: plan.Percent}
	caps := make([]float64, len(buckets))
	for i, b := range buckets {
		caps[i] = b.Capacity
		if req.Part == PartQuota {
			caps[i] = float64(b.Quota.Limit)
		}
		res.Capacity += caps[i]
	}
	var targets []float64
	if req.Tokens != nil {
		targets = split(share(*req.Tokens, plan, req.Part), caps, req.Part == PartQuota)
	}
	var errs []error
	for i, b := range buckets {
		k := Key{Key: b.Key, Capacity: caps[i]}
		if req.Part == PartQuota {
			k.Key = b.Quota.Key
		}
		if len(plan.Shards) > 0 {
			k.Shard = &i
		}
		target := ""
		if targets != nil {
			target = strconv.FormatFloat(targets[i], 'g', -1, 64)
		}
		var err error
		if k.Before, k.After, err = one(ctx, c, b, req.Part, target, layout); err != nil {
			k.Error = err.Error()
			errs = append(errs, fmt.Errorf("key %d of %d: %w", i+1, len(buckets), err))
		}
		res.Before += k.Before
		res.After += k.After
		res.Keys = append(res.Keys, k)
	}
	return res, errors.Join(errs...)
}

// share is this gateway's share of tokens for the whole rule: its
// region's percentage (a quota's share is floored, as the quota's is).
func share(tokens int64, plan decision.Plan, part Part) float64 {
	if plan.Region == "" {
		return float64(tokens)
	}
	if part == PartQuota {
		return float64(tokens * int64(plan.Percent) / 100)
	}
	return float64(tokens) * float64(plan.Percent) / 100
}

// split divides total over keys of capacities caps: whole tokens in parts
// that differ by at most one (whole: quotas count whole tokens, else a
// fraction goes to the first key with room), each at most its capacity,
// what a key cannot hold going to the others.
func split(total float64, caps []float64, whole bool) []float64 {
	n := len(caps)
	out := make([]float64, n)
	units := math.Floor(total)
	for i := range out {
		out[i] = math.Floor(units / float64(n))
		if float64(i) < math.Mod(units, float64(n)) {
			out[i]++
		}
	}
	if !whole {
		out[0] += total - units
	}
	spill := 0.0
	for i := range out {
		if out[i] > caps[i] {
			spill += out[i] - caps[i]
			out[i] = caps[i]
		}
	}
	for i := 0; i < n && spill > 1e-9; i++ {
		room := min(caps[i]-out[i], spill)
		if whole {
			room = math.Floor(room)
		}
		out[i] += room
		spill -= room
	}
	return out
}

// one runs the script for bucket b.
func one(ctx context.Context, c redis.UniversalClient, b limiter.Bucket, part Part, target string, layout limiter.Layout) (before, after float64, err error) {
	keys, _ := limiter.ScriptCall(&b, 1, 1, 0, layout)
	_, field := limiter.Storage(b.Key)
	compat := "0"
	if layout == limiter.LayoutCompat {
		compat = "1"
	}
	args := []any{b.Capacity, b.RefillTokens, b.RefillPeriodMs, field, compat, string(part), target}
	if part == PartQuota {
		q := b.Quota
		args = append(args, q.Limit, q.Start, q.Switch, q.End, q.ShiftMs)
	} else if len(keys) > 2 {
		keys = keys[:2]
	}
	vals, err := script.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redis: %w", err)
	}
	if len(vals) != 3 {
		return 0, 0, fmt.Errorf("redis: unexpected reply of %d values", len(vals))
	}
	bs, _ := vals[0].(string)
	as, _ := vals[1].(string)
	if before, err = strconv.ParseFloat(bs, 64); err == nil {
		after, err = strconv.ParseFloat(as, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("redis: unexpected reply: %w", err)
	}
	return before, after, nil
}

// Answer is the admin listener's answer to POST /debug/reset.
type Answer struct {
	// Gateway is the pod (or host) that answered.
	Gateway string `json:"gateway"`
	// Who is the token's name or fingerprint (never the token).
	Who    string `json:"who"`
	Tenant string `json:"tenant"`
	Route  string `json:"route"`
	Result
	// Error is set when a key could not be set (the answer is then 503).
	Error string `json:"error,omitempty"`
}

// Forgotten is the answer to POST /debug/forget: the gateway dropped what
// it held for the bucket's keys (limiter.Chain.Forget).
type Forgotten struct {
	Gateway string `json:"gateway"`
	Who     string `json:"who"`
	Tenant  string `json:"tenant"`
	Route   string `json:"route"`
	Region  string `json:"region,omitempty"`
	Buckets int    `json:"buckets"`
}
