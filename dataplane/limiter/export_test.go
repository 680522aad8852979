package limiter

import (
	"context"
	"errors"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

var validID = v1alpha1.ValidIdentifier

// allower adapts a Taker to Limiter for tests: one decision per Take.
type allower struct{ Taker }

func allow(t Taker) allower { return allower{t} }

func (a allower) Allow(ctx context.Context, b Bucket, cost int64) (Outcome, error) {
	r, err := a.Take(ctx, b, cost, cost)
	if err != nil {
		return Outcome{}, err
	}
	return r.outcome(cost), nil
}

// tripBreaker opens the breaker of the single Redis server at once, as a
// run of refused connections on other buckets would.
func tripBreaker(c *Chain) {
	br, _ := c.breaker.forKey(context.Background(), "")
	br.gone.Store(true)
	br.streakStart.Store(1)
	for range br.opts.FailuresToOpen {
		if done, err := br.cb.Allow(); err == nil {
			done(errTripped)
		}
	}
}

var errTripped = errors.New("tripped by the test")
