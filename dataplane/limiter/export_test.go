package limiter

import (
	"context"

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
