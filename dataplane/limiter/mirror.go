package limiter

import "context"

// Mirror is the layer that keeps the local buckets (Local) in step with
// Redis: it alone tells Local what the calls to Redis did. It sits below
// the per-node breakers and above the Batcher, so it sees exactly the calls
// that go to Redis (a breaker that is not closed lets none through), at the
// moment they go:
//
//   - before a call: Local.Sending (a bucket this gateway holds nothing
//     for starts empty while the call is out: the call may be taking
//     tokens in Redis), and, for a call the Chain marked (owing), the
//     tokens the local fallback admitted against the bucket's quota ride
//     along (Local.TakeOwed);
//   - Redis's answer: Local.Observe (the tokens left in Redis's bucket)
//     and, for a take (not a charge or a give-back, whose quota parts say
//     nothing of the period's count), Local.ObserveQuota;
//   - a failed call: the owed tokens go back (Local.ReturnOwed), and the
//     local bucket is left as after an unanswered call (Local.Unsure) or,
//     when the call admitted nothing in Redis (Redis refused or closed the
//     connection, or the script failed), as if it was never sent
//     (Local.NotSent). This happens before the breaker above counts the
//     failure: once that opens it, other requests of the bucket decide
//     locally at once, and must find the bucket as this call left it.
//
// A reply that comes after its Take returned goes from the Batcher to the
// Cache, past the Mirror: the bucket stays Unsure (empty locally) until
// Redis answers a call in time.
type Mirror struct {
	local *Local
	next  Taker
}

// NewMirror keeps local in step with the calls that go through it to
// next.
func NewMirror(local *Local, next Taker) *Mirror {
	return &Mirror{local: local, next: next}
}

// Take implements Taker.
func (m *Mirror) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	if b.Quota.Owed > 0 {
		b.Quota.Owed, b.Quota.OwedStart = m.local.TakeOwed(b)
	}
	m.local.Sending(b)
	r, err := m.next.Take(ctx, b, cost, want)
	if err != nil {
		m.local.ReturnOwed(b, b.Quota.Owed, b.Quota.OwedStart)
		m.unanswered(b, err)
		return r, err
	}
	m.local.Observe(b, r.Remaining)
	if cost >= 0 && !b.Charge {
		m.local.ObserveQuota(b, r.Quota)
	}
	return r, nil
}

// owing marks a decision's call on b as one that carries what the local
// fallback owes b's quota, when it owes anything: the Cache then leaves
// the answer to Redis, which counts those tokens first, and Take sends
// them.
func (m *Mirror) owing(b *Bucket) {
	b.Quota.Owed, b.Quota.OwedStart = m.local.owing(b), 0
}

// unanswered keeps the local bucket of b after its call to Redis failed
// with err: empty when the call may have taken tokens (Unsure), as if never
// sent when Redis refused or closed the connection, the script failed (no
// replica's call admits anything in Redis then) or Redis refused the call
// unrun (TRYAGAIN, a slot in migration).
func (m *Mirror) unanswered(b Bucket, err error) {
	if redisGone(err) || IsScriptError(err) || isTryAgain(err) {
		m.local.NotSent(b)
		return
	}
	m.local.Unsure(b)
}

// unsure records that a request of b got no answer in time while Redis is
// not known to be down (the call of another request it waited for, say):
// b's state in Redis is unknown, so its local bucket starts empty.
func (m *Mirror) unsure(b Bucket) { m.local.Unsure(b) }
