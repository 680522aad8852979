package limiter

import (
	"context"
	"errors"
)

// spreadUnit is the fraction of a token a spread request takes: shards of
// fractional size (10 tokens in 4 shards of 2.5) give all they hold.
const spreadUnit = 1000

// AllowSpread serves one request from several shards of a bucket: a cost
// larger than one shard can ever hold, but within the whole bucket. It
// takes cost tokens from shards together, trying them in order, or none;
// every shard is one shard of the same bucket (same WholeKey, Shards,
// Capacity and refill). It takes what each shard holds (one call
// per shard, in thousandths of a token) until the cost is covered. When the
// shards together hold less, it gives back what it took and rejects, with a
// Retry-After of the missing tokens at the whole bucket's refill rate. Two
// spread requests racing for the last tokens can both be rejected for a
// moment (each gives back what the other needed): fewer admissions, never
// more. A failure of Redis on any shard gives back what was taken and
// applies the rule's failure mode to the whole request, as Allow does.
func (c *Chain) AllowSpread(ctx context.Context, shards []Bucket, cost int64) (Outcome, error) {
	if len(shards) == 0 {
		return Outcome{}, errNoShards
	}
	first := shards[0]
	n := int64(max(1, first.Shards))
	whole := first.Capacity * float64(n)
	// The whole bucket's refill, per millisecond.
	perMs := float64(first.RefillTokens) / float64(first.RefillPeriodMs) * float64(n)
	if c.cache == nil {
		return c.local.AllowSpread(ctx, shards, cost)
	}
	if float64(cost) > whole {
		// Never, as Redis answers for one bucket: no Retry-After is true.
		return Outcome{RetryAfter: -1, ResetAfter: msDuration(whole / perMs), Source: SourceRedis}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.MaxWait)
	defer cancel()
	need := cost * spreadUnit
	var took []part
	var remaining int64
	sq := spreadQuota{whole: first.Quota.Whole}
	for i, b := range shards {
		b.Unit = spreadUnit
		r, err := c.breaker.Take(ctx, b, 1, need)
		if err != nil {
			c.giveBack(took)
			return c.failed(first, cost, err), nil // first and b share their local bucket
		}
		c.cache.learn(b, r)
		remaining += r.Remaining
		sq.add(r)
		if r.Granted > 0 {
			took = append(took, part{b, r.Granted, r.Quota.Start})
			need -= r.Granted
		}
		if need <= 0 {
			// Remaining is an estimate: the shards asked, scaled to all.
			est := remaining * n / int64(i+1)
			return Outcome{Allowed: true, Remaining: est, ResetAfter: msDuration((whole - float64(est)) / perMs), Source: SourceRedis,
				Quota: sq.outcome(n, int64(i+1), false), taken: taken{from: takenSpread, cost: cost, parts: &took}}, nil
		}
	}
	c.giveBack(took)
	return spreadRejected(&sq, cost, need, whole, perMs), nil
}

var errNoShards = errors.New("limiter: AllowSpread without shards")

// AllowSpread is Chain.AllowSpread for the local buckets: the local bucket
// of a sharded rule covers the whole rule, so it decides cost at once.
func (l *Local) AllowSpread(_ context.Context, shards []Bucket, cost int64) (Outcome, error) {
	if len(shards) == 0 {
		return Outcome{}, errNoShards
	}
	return l.Decide(shards[0], cost), nil
}

// spreadRejected is the outcome of a spread request the shards could not
// cover: need units were missing.
func spreadRejected(sq *spreadQuota, cost, need int64, whole, perMs float64) Outcome {
	missing := float64(need) / spreadUnit
	d := Outcome{
		Remaining:  int64(float64(cost) - missing),
		RetryAfter: msDuration(missing / perMs),
		ResetAfter: msDuration((whole - float64(cost) + missing) / perMs),
		Source:     SourceRedis,
	}
	if sq.set {
		// Every shard was asked: the quota refused if all of its parts
		// together held less than cost before this request.
		refused := sq.remaining+(cost*spreadUnit-need)/spreadUnit < cost
		d.Quota = sq.outcome(1, 1, refused)
		d.Quota.Remaining += (cost*spreadUnit - need) / spreadUnit // given back
		switch {
		case refused && cost > sq.whole:
			d.RetryAfter = -1 // never
		case refused:
			d.RetryAfter = d.Quota.ResetAfter
		}
	}
	return d
}

// spreadQuota adds up the quota parts of the shards a spread request asked.
type spreadQuota struct {
	whole     int64 // the whole bucket's quota
	set       bool
	remaining int64
	resetMs   int64
}

func (s *spreadQuota) add(r TakeResult) {
	if r.Quota.Set {
		s.set = true
		s.remaining += r.Quota.Remaining
		s.resetMs = max(s.resetMs, r.Quota.ResetMs)
	}
}

// outcome scales the parts of asked shards of n to the whole quota.
func (s *spreadQuota) outcome(n, asked int64, refused bool) QuotaOutcome {
	if !s.set {
		return QuotaOutcome{}
	}
	return QuotaOutcome{Set: true, Remaining: s.remaining * n / asked, ResetAfter: msDuration(float64(s.resetMs)), Refused: refused}
}

// part is what a spread request took from one shard, in units, and the
// quota period it counted them in.
type part struct {
	b          Bucket
	units      int64
	quotaStart int64
}

// giveBack returns what a rejected spread request took, on a context of
// its own (the request's may be over): a give-back that fails leaves those
// tokens taken (fewer admissions, never more).
func (c *Chain) giveBack(took []part) {
	if len(took) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.MaxWait)
	defer cancel()
	for _, p := range took {
		_ = c.giveBackCall(ctx, p.b, p.units, p.quotaStart)
	}
}
