package explain

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteText prints r for a person (`tollgate explain`).
func (r Report) WriteText(w io.Writer) error {
	t := &text{}
	t.rule(r)
	t.buckets(r)
	t.concurrency(r)
	t.quota(r)
	t.fallback(r)
	t.limits(r)
	_, err := io.WriteString(w, t.String())
	return err
}

// text builds WriteText's output.
type text struct{ strings.Builder }

func (t *text) p(format string, args ...any) { fmt.Fprintf(t, format+"\n", args...) }

// rule prints the rule in force and why.
func (t *text) rule(r Report) {
	t.p("tenant %s on route %s", r.Tenant, r.Route)
	if !r.RouteKnown {
		t.p("  note: route %q is not in this gateway's route table (HTTP requests never reach it; the Envoy rate limit service may)", r.Route)
	}
	t.p("")
	rule := r.Rule
	source := rule.Source
	if source == "" {
		source = "built-in default"
	}
	t.p("rule in force:  %s (tenant %s, route %s)", source, rule.Tenant, rule.Route)
	t.p("  chosen by:    %s", rule.PrecedenceText)
	t.p("  limit:        capacity %d, refill %d per %s, %s, failureMode %s", rule.Capacity, rule.RefillTokens, rule.RefillPeriod, rule.Mode, rule.FailureMode)
	if rule.Cost != "" {
		t.p("  cost:         %s", rule.Cost)
	}
	t.p("  snapshot:     version %d", r.SnapshotVersion)
	if r.Region != "" {
		t.p("  region:       %s holds %d%% of the rule (in force; the split %s)", r.Region, r.RegionPercent, r.RegionSplit)
		if r.DemandKey != "" {
			t.p("  demand:       recorded in %s", r.DemandKey)
		}
	}
	t.p("  enforced here: capacity %s, refill %s/s", num(r.Capacity), num(r.RefillPerSecond))
	t.p("")
}

// buckets prints each bucket: in Redis and held by this gateway.
func (t *text) buckets(r Report) {
	if len(r.Buckets) > 1 {
		t.p("buckets (%d shards; a request is rejected only when every shard is empty):", len(r.Buckets))
	} else {
		t.p("bucket:")
	}
	for _, bk := range r.Buckets {
		t.p("  %s  capacity %s, refill %s/s, prefetch batch %d", bk.Key, num(bk.Capacity), num(bk.RefillPerSecond), bk.PrefetchBatch)
		switch st := bk.Redis; {
		case st == nil:
			t.p("    no Redis (--limiter=local)")
			continue
		case st.Error != "":
			t.p("    Redis: not readable: %s", st.Error)
		case !st.Exists:
			t.p("    Redis: nothing stored in %s field %s (full: %s tokens)", st.Hash, st.Field, num(st.Tokens))
		default:
			t.p("    Redis: %s tokens now (stored %s, %v ago, in %s field %s; the hash expires in %v)",
				num(st.Tokens), num(st.StoredTokens), ms(st.StoredAgoMs), st.Hash, st.Field, ms(st.TTLMs))
			if st.Tokens < 0 {
				t.p("    in debt: responses cost more than the bucket held; requests wait until it refills")
			}
		}
		node := bk.Node
		if node == "" {
			node = "the Redis server"
		}
		held := "no prefetched tokens"
		if bk.Prefetched > 0 {
			held = fmt.Sprintf("%d prefetched tokens (for %v more)", bk.Prefetched, ms(bk.PrefetchExpiresInMs))
		}
		t.p("    this gateway: %s; breaker of %s %s", held, node, bk.Breaker)
		if bk.EmptyForMs > 0 {
			t.p("    this gateway rejects requests of %d+ tokens without asking Redis: %d tokens for %v more, larger costs longer (Redis refused a request; the gateway follows the bucket's state from Redis's last answer)", bk.EmptyCost, bk.EmptyCost, ms(bk.EmptyForMs))
		}
	}
	t.p("")
}

// quota prints the calendar quota, if the rule has one.
func (t *text) quota(r Report) {
	q := r.Quota
	if q == nil {
		return
	}
	t.p("quota:          %d per %s (%s), this period %s to %s", q.Limit, q.Period, q.TimeZone, q.Start, q.End)
	switch {
	case q.Error != "":
		t.p("  Redis: not readable: %s", q.Error)
	case r.Limiter != "redis":
		t.p("  no Redis (--limiter=local): each replica counts 1/N on its own")
	default:
		t.p("  Redis: %d used, %d left (%s)", q.Used, q.Remaining, strings.Join(q.Keys, ", "))
	}
	t.p("")
}

// fallback prints the breakers, N and the local fallback's bucket.
func (t *text) fallback(r Report) {
	if r.Limiter == "redis" {
		t.p("breaker:        %s", r.Breaker)
		for _, n := range slices.Sorted(maps.Keys(r.Nodes)) {
			name := n
			if name == "" {
				name = "Redis server"
			}
			t.p("  %s: %s", name, r.Nodes[n])
		}
	} else {
		t.p("limiter:        local only (--limiter=local)")
	}
	counted := "counted (from Leases, or given by --replicas)"
	if !r.ReplicasCounted {
		counted = "assumed (not counted yet)"
	}
	t.p("replicas (N):   %d, %s", r.Replicas, counted)
	lf := r.LocalFallback
	state := "none yet (would start full)"
	if lf.Exists {
		state = num(lf.Tokens) + " tokens now"
	}
	t.p("local fallback: %s: %s; capacity %s (1/N), refill %s/s", lf.Key, state, num(lf.Capacity), num(lf.RefillPerSecond))
}

// num prints f with at most three decimals, or three significant digits
// when smaller (slow refill rates).
func num(f float64) string {
	if f != 0 && math.Abs(f) < 0.01 {
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
	return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// limits prints the limits that stack, and which binds.
func (t *text) limits(r Report) {
	if len(r.Limits) == 0 {
		return
	}
	t.p("")
	from := ""
	if r.Address != "" {
		from = " from " + r.Address
	}
	t.p("limits that apply%s (a request must pass every one; the one marked decides now):", from)
	for _, l := range r.Limits {
		mark := " "
		if l.Binds {
			mark = "*"
		}
		kind := l.Kind
		if kind == "" {
			kind = "tenant,route"
		}
		tokens := "state unknown (local limiter)"
		if l.Redis != nil {
			tokens = num(l.Redis.Tokens) + " tokens left"
		}
		source := l.Source
		if source == "" {
			source = "built-in default"
		}
		t.p(" %s %-24s by %-16s %s: capacity %s, refill %s/s, %s (key %s)", mark, l.Name, kind, source, num(l.Capacity), num(l.RefillPerSecond), tokens, l.Key)
	}
}
