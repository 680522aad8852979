package limiter

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker is a circuit breaker around the Redis side of the chain (the
// Mirror and the Batcher below it, or Redis). It sits below the Cache, so
// it only ever hears of real Redis calls: answers the Cache gives on its
// own neither close it nor reset its count of failures. It knows nothing
// of the local buckets: the Mirror below it keeps them.
//
// Policy:
//   - FailuresToOpen consecutive failed calls open it, if they span at least
//     MinFailingFor: a dead Redis fails every call for as long as it is
//     dead, while a busy machine fails a burst of calls at one moment and
//     then succeeds again. Refused or closed connections (a Redis that is
//     gone) open it after FailuresToOpen failures at once. A failed call is
//     one Redis did not answer: silent after it was written, and silent to
//     the Batcher's PING too (ErrRedisSilent), a connection error (refused,
//     reset) or an error reply about the node (OOM, READONLY, LOADING...).
//     A call given up while still queued in a busy gateway, one unanswered
//     within MaxWait while Redis was not silent (a busy machine, a slow
//     Redis), one whose client went away, or one the script failed on
//     (IsScriptError: Redis answered, and the same call fails the same way
//     on a healthy node) is not a failure of Redis and does not count.
//   - While it is not closed, Take fails at once with ErrOpen: no request
//     waits for Redis. Requests never probe.
//   - probe (run by Breakers.Run every OpenFor/2) checks Redis itself (PING,
//     not a cached answer) once OpenFor has passed; a PING answered within
//     ProbeTimeout closes the breaker, a failed one keeps it open for
//     another OpenFor. So while Redis stays down it stays open, without
//     flapping.
type Breaker struct {
	node   string // the Redis node it guards ("" for a single server)
	next   Taker
	pinger Pinger
	cb     *gobreaker.TwoStepCircuitBreaker[struct{}]
	opts   BreakerOptions

	// waited counts calls that went to Redis.
	waited atomic.Int64
	// streakStart is when the current run of failures began (unix ns; 0:
	// the last call succeeded).
	streakStart atomic.Int64
	// gone: the last failure was a refused or closed connection.
	gone atomic.Bool
	// lastErr is Redis's most recent error (an errBox), for logs.
	lastErr atomic.Value
	// closed mirrors cb's state being closed (set on every change of
	// state), so that a call finds an open breaker without taking cb's
	// lock: the one state read per decision is an atomic load.
	closed atomic.Bool
}

type errBox struct{ err error }

// Pinger is implemented by Takers that can be health-checked without taking
// a token.
type Pinger interface {
	Ping(ctx context.Context) error
}

// BreakerOptions configure a Breaker.
type BreakerOptions struct {
	// FailuresToOpen consecutive failures open the breaker. Default 5.
	FailuresToOpen uint32
	// MinFailingFor is how long the failures must have gone on. Default
	// 25ms.
	MinFailingFor time.Duration
	// OpenFor is how long the breaker stays open before it probes. Default
	// 500ms.
	OpenFor time.Duration
	// ProbeTimeout bounds one PING probe. Default 50ms.
	ProbeTimeout time.Duration
	// OnStateChange is called when the breaker changes state. Optional.
	OnStateChange func(StateChange)
	// ObserveRedis is called after every call to Redis with its duration
	// and its error as a failure of Redis: nil for a script error (Redis
	// answered; ScriptError reports it). Optional; must be cheap.
	ObserveRedis func(time.Duration, error)
	// ScriptError is called after a call for bucket b failed with a script
	// error (IsScriptError). Optional; must be cheap.
	ScriptError func(b Bucket, err error)
}

// StateChange is a breaker's change of state, given to OnStateChange.
type StateChange struct {
	// From and To are "closed", "open" or "half-open".
	From, To string
	// LastError is Redis's most recent error at the change (nil if it never
	// failed): what made a breaker open, for logs.
	LastError error
}

// ErrOpen is returned by Take while the breaker is not closed.
var ErrOpen = errors.New("limiter: circuit breaker open")

// errNotRedis marks errors that say nothing about Redis.
var errNotRedis = errors.New("not Redis's failure")

// NewBreaker wraps next; pinger probes Redis while the breaker is open.
func NewBreaker(next Taker, pinger Pinger, opts BreakerOptions) *Breaker {
	if opts.FailuresToOpen == 0 {
		opts.FailuresToOpen = 5
	}
	if opts.OpenFor <= 0 {
		opts.OpenFor = 500 * time.Millisecond
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 50 * time.Millisecond
	}
	if opts.MinFailingFor <= 0 {
		opts.MinFailingFor = 25 * time.Millisecond
	}
	br := &Breaker{next: next, pinger: pinger, opts: opts}
	br.closed.Store(true)
	br.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     opts.OpenFor,
		ReadyToTrip: br.readyToTrip,
		IsExcluded:  func(err error) bool { return errors.Is(err, errNotRedis) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			br.closed.Store(to == gobreaker.StateClosed)
			if opts.OnStateChange != nil {
				opts.OnStateChange(StateChange{From: from.String(), To: to.String(), LastError: br.LastError()})
			}
		},
	})
	return br
}

// readyToTrip: enough consecutive failures, over long enough (or a Redis
// that refused or closed the connection).
func (br *Breaker) readyToTrip(c gobreaker.Counts) bool {
	start := br.streakStart.Load()
	if c.ConsecutiveFailures < br.opts.FailuresToOpen || start == 0 {
		return false
	}
	return br.gone.Load() || time.Since(time.Unix(0, start)) >= br.opts.MinFailingFor
}

// Take implements Taker.
func (br *Breaker) Take(ctx context.Context, b Bucket, cost, want int64) (TakeResult, error) {
	// Not closed: open, or half-open (only probe sends then). gobreaker
	// moves from open to half-open when asked for its state, which probe
	// does.
	done, err := br.enter()
	if err != nil {
		return TakeResult{}, err
	}
	start := time.Now()
	r, err := br.next.Take(ctx, b, cost, want)
	br.leave(ctx, b, start, err, done)
	return r, err
}

// enter lets one call through to Redis, or fails with ErrOpen while the
// breaker is not closed; done, given the call's error, ends it (leave).
func (br *Breaker) enter() (done func(error), err error) {
	if !br.closed.Load() {
		return nil, ErrOpen
	}
	done, err = br.cb.Allow()
	if err != nil {
		return nil, ErrOpen
	}
	br.waited.Add(1)
	return done, nil
}

// leave ends a call for b that enter let through at start: it reports
// the call and counts err, classified, towards opening the breaker.
func (br *Breaker) leave(ctx context.Context, b Bucket, start time.Time, err error, done func(error)) {
	br.observe(b, time.Since(start), err)
	done(br.classify(ctx, err))
}

// observe reports a call for b that took d and ended with err to
// ObserveRedis and, for a script error, to ScriptError.
func (br *Breaker) observe(b Bucket, d time.Duration, err error) {
	script := IsScriptError(err)
	if script && br.opts.ScriptError != nil {
		br.opts.ScriptError(b, err)
	}
	if br.opts.ObserveRedis != nil {
		if script {
			err = nil
		}
		br.opts.ObserveRedis(d, err)
	}
}

// classify says whether err is Redis's failure; it records those for logs.
func (br *Breaker) classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		br.streakStart.Store(0)
		return nil
	case errors.Is(err, ErrNotSent), errors.Is(err, ErrClosed), errors.Is(ctx.Err(), context.Canceled):
		// Queued in a busy gateway, shutting down, or the client went away.
		return errNotRedis
	case IsScriptError(err):
		// Redis answered: the script fails on this bucket (see
		// IsScriptError), on a healthy node.
		return errNotRedis
	case isTryAgain(err):
		// Redis answered: the bucket's slot is being migrated (see
		// isTryAgain), on a healthy node.
		return errNotRedis
	case errors.Is(err, ErrRedisSilent):
		// Counted below.
	case isTimeout(err):
		// Written, and not answered within MaxWait, but Redis was not
		// silent (that is ErrRedisSilent): a busy machine or a slow Redis.
		// It does not open the breaker; the request is decided without
		// adding to what Redis may grant it (see Chain).
		return errNotRedis
	}
	br.streakStart.CompareAndSwap(0, time.Now().UnixNano())
	br.gone.Store(redisGone(err))
	br.lastErr.Store(errBox{err})
	return err
}

// probe sends one PING when the breaker is due for a probe.
func (br *Breaker) probe(ctx context.Context) {
	if br.cb.State() == gobreaker.StateClosed {
		return
	}
	done, err := br.cb.Allow()
	if err != nil {
		return // still open
	}
	pctx, cancel := context.WithTimeout(ctx, br.opts.ProbeTimeout)
	start := time.Now()
	err = br.pinger.Ping(pctx)
	cancel()
	if br.opts.ObserveRedis != nil {
		br.opts.ObserveRedis(time.Since(start), err)
	}
	if err != nil && ctx.Err() != nil {
		err = errors.Join(errNotRedis, err) // shutting down
	} else if err != nil {
		br.lastErr.Store(errBox{err})
	} else {
		br.streakStart.Store(0)
	}
	done(err)
}

// LastError is Redis's most recent error (nil if it never failed), for
// logs; a StateChange carries it.
func (br *Breaker) LastError() error {
	if b, ok := br.lastErr.Load().(errBox); ok {
		return b.err
	}
	return nil
}

// Waited is the number of calls that went to Redis (each waited at most
// the chain's MaxWait). Once the breaker is open it stays still until the
// breaker closes again.
func (br *Breaker) Waited() int64 { return br.waited.Load() }

// State is the breaker state: "closed", "open" or "half-open".
func (br *Breaker) State() string { return br.cb.State().String() }

// isTimeout reports whether err is a deadline (the chain's MaxWait, or a
// connection read or write deadline derived from it).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
