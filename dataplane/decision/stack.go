package decision

import (
	"context"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Limit is one limit a request must pass: the rule in force of one kind
// (snapshot.Rule.Kind) and the name of its bucket for the request.
type Limit struct {
	Rule *snapshot.Rule
	// Key is the bucket's name (KeyFor), before region and shards.
	Key string
	// Name names the limit in the limit headers (snapshot.Rule.Name).
	Name string
}

// Stacked is the outcome of the limits of one request, decided in order.
type Stacked struct {
	Limits []Limit
	// Decisions has one entry per limit decided: all of them, or, decided
	// in order, those up to the one that refused (the others were not
	// asked).
	Decisions []Decision
	// Binding is the index of the limit that binds: the one that refused,
	// else the one with the fewest tokens left.
	Binding int
	// Refused is true when a limit that is not Shadow refused (or failed
	// closed): the request does not pass, and what the limits before it
	// took was given back.
	Refused bool
	// Shadowed is true when a Shadow limit would have refused.
	Shadowed bool
}

// Bound is the decision of the limit that binds, and its rule.
func (s *Stacked) Bound() (Decision, *snapshot.Rule, string) {
	l := s.Limits[s.Binding]
	return s.Decisions[s.Binding], l.Rule, l.Name
}

// Limits are the limits that apply to req: primary first (the rule of the
// default kind, keyed by tenant and route, that RuleFor returned; nil for
// a request without an identity, which no such rule limits), then the rule
// in force of every other kind of the snapshot that applies to it. It
// returns nil, without allocating, when no rule of another kind applies:
// the caller decides under primary alone (DecideRule), as before kinds
// existed. An error is a HeaderError: a header that keys a bucket is
// malformed.
func (e *Engine) Limits(req Request, primary *snapshot.Rule) ([]Limit, error) {
	extra := e.opts.Rules.Extra(req.Tenant, req.Route, req.Claims, nil)
	if len(extra) == 0 {
		return nil, nil
	}
	out := make([]Limit, 0, len(extra)+1)
	if primary != nil {
		out = append(out, Limit{Rule: primary, Key: limiter.Key(req.Tenant, req.Route), Name: req.Route})
	}
	for _, r := range extra {
		k, err := KeyFor(r, &req)
		if err != nil {
			return nil, err
		}
		out = append(out, Limit{Rule: r, Key: k, Name: r.Name(req.Route)})
	}
	return out, nil
}

// DecideStack takes costs[i] tokens from the bucket of each limit, all
// or nothing: a request refused by one limit takes nothing from the
// others, and no limit ever admits more than it allows. Where the limiter
// can (decideTogether: plain buckets in one Redis Cluster slot, or on one
// server), one script call decides every limit and takes only when all
// admit. Otherwise the limits are decided in order (decideInOrder): when
// one refuses, the limits after it are not asked and what the ones before
// it took is given back (Refund); between a take and its refund another
// request may find the tokens gone and be refused although it could have
// passed (docs/rules.md). A Shadow limit that would refuse lets the
// request pass (Shadowed). An error comes only from a Limiter that
// returns one; what was taken before it is given back.
func (e *Engine) DecideStack(ctx context.Context, req Request, limits []Limit, costs []int64) (Stacked, error) {
	st := Stacked{Limits: limits}
	oneCall := e.decideTogether(ctx, &st, costs)
	if e.opts.Stacked != nil {
		e.opts.Stacked(oneCall)
	}
	if !oneCall {
		if err := e.decideInOrder(ctx, &st, costs); err != nil {
			return st, err
		}
	}
	if !st.Refused {
		st.Binding = fewestLeft(st.Decisions)
	}
	if e.opts.Observe != nil && req.Tenant != "" {
		e.opts.Observe(req.Tenant, req.Route, !st.Refused)
	}
	return st, nil
}

// decideTogether decides the limits of st in one call (Limiter.AllowAll)
// when each is one plain bucket: no region share, shards, quota or
// prefetch batch. It reports false, having taken nothing, when it could
// not. Every limit is decided then, those after a refusal too.
func (e *Engine) decideTogether(ctx context.Context, st *Stacked, costs []int64) bool {
	if len(st.Limits) < 2 {
		return false // one limit: nothing to give back, and Allow coalesces
	}
	ws := make([]limiter.Want, len(st.Limits))
	for i, l := range st.Limits {
		b, region := e.bucketAt(l.Key, l.Rule)
		// What the bucket alone does not say (a region share, shards,
		// prefetch); the limiter's oneCall checks the rest (a quota, ...).
		if region != "" || l.Rule.Shards > 1 || e.batch(l.Rule, b) > 0 {
			return false
		}
		ws[i] = limiter.Want{Bucket: b, Cost: costs[i], Shadow: l.Rule.Shadow}
	}
	outs, refused, ok := e.opts.Limiter.AllowAll(ctx, ws)
	if !ok {
		return false
	}
	st.Decisions = make([]Decision, len(outs))
	for i, o := range outs {
		b := &ws[i].Bucket
		st.Decisions[i] = Decision{Outcome: o, Limit: max(1, int64(b.Capacity))}
		if !o.Allowed && st.Limits[i].Rule.Shadow {
			st.Shadowed = true
		}
	}
	if refused >= 0 {
		st.Refused, st.Binding = true, refused
	}
	return true
}

// decideInOrder decides the limits of st one after the other, giving back
// what the ones before a refusal took.
func (e *Engine) decideInOrder(ctx context.Context, st *Stacked, costs []int64) error {
	st.Decisions = make([]Decision, 0, len(st.Limits))
	for i, l := range st.Limits {
		d, err := e.decideAt(ctx, l.Key, l.Rule, costs[i])
		if err != nil {
			e.giveBack(ctx, st)
			return err
		}
		st.Decisions = append(st.Decisions, d)
		if d.Allowed {
			continue
		}
		if l.Rule.Shadow {
			st.Shadowed = true
			continue
		}
		st.Refused, st.Binding = true, i
		st.Decisions = st.Decisions[:i]
		e.giveBack(ctx, st)
		st.Decisions = append(st.Decisions, d)
		break
	}
	return nil
}

// giveBack refunds every decision of st (an error leaves its tokens
// spent: fewer admissions, never more).
func (e *Engine) giveBack(ctx context.Context, st *Stacked) {
	for j, d := range st.Decisions {
		if back, err := e.refundAt(ctx, st.Limits[j].Key, st.Limits[j].Rule, d); err == nil {
			st.Decisions[j] = back
		}
	}
}

// fewestLeft is the index of the decision with the fewest tokens left
// (the bucket's, or its quota's when that has fewer).
func fewestLeft(ds []Decision) int {
	best, left := 0, int64(-1)
	for i, d := range ds {
		r := d.Remaining
		if d.Quota.Set && d.Quota.Remaining < r {
			r = d.Quota.Remaining
		}
		if left < 0 || r < left {
			best, left = i, r
		}
	}
	return best
}

// Refunds gives back what every decision of st took (a request admitted
// by all its limits and refused after, by a concurrency slot).
func (e *Engine) Refunds(ctx context.Context, st *Stacked) {
	e.giveBack(ctx, st)
}
