package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Failover puts a deadline and a circuit breaker around a primary (Redis)
// limiter and decides by each rule's failure mode when the primary cannot:
// LocalFallback uses the local buckets, FailOpen admits, FailClosed rejects.
// It never returns an error.
//
// Once the breaker is open no request waits for Redis. When the open period
// ends, one request at a time becomes a probe: it is decided locally at once
// while its Redis call runs in the background, so even probes do not pay the
// deadline; a successful probe closes the breaker.
type Failover struct {
	primary Limiter
	local   *Local
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	opts    FailoverOptions

	// waited counts requests that waited for the primary; probes counts
	// background probes.
	waited, probes atomic.Int64
	// lastErr is the primary's most recent error (an errBox), for logs.
	lastErr atomic.Value
}

type errBox struct{ err error }

// Pinger is implemented by primaries that can be health-checked without
// taking a token; Run uses it to close the breaker when no traffic comes.
type Pinger interface {
	Ping(ctx context.Context) error
}

// FailoverOptions configure Failover.
type FailoverOptions struct {
	// Timeout is the deadline of one primary decision. Default 5ms.
	Timeout time.Duration
	// FailuresToOpen consecutive failures open the breaker. Default 5.
	FailuresToOpen uint32
	// OpenFor is how long the breaker stays open before it probes. Default
	// 500ms.
	OpenFor time.Duration
	// FailClosedRetryAfter is the Retry-After of fail-closed rejections.
	// Default 1s.
	FailClosedRetryAfter time.Duration
	// OnStateChange is called when the breaker changes state ("closed",
	// "open", "half-open"). Optional.
	OnStateChange func(from, to string)
	// ObservePrimary is called after every primary call with its duration
	// and error. Optional; must be cheap.
	ObservePrimary func(time.Duration, error)
}

// NewFailover wraps primary; local decides while primary cannot.
func NewFailover(primary Limiter, local *Local, opts FailoverOptions) *Failover {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Millisecond
	}
	if opts.FailuresToOpen == 0 {
		opts.FailuresToOpen = 5
	}
	if opts.OpenFor <= 0 {
		opts.OpenFor = 500 * time.Millisecond
	}
	if opts.FailClosedRetryAfter <= 0 {
		opts.FailClosedRetryAfter = time.Second
	}
	f := &Failover{primary: primary, local: local, opts: opts}
	f.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     opts.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= opts.FailuresToOpen },
		// A request whose client went away says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, errClientGone) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if opts.OnStateChange != nil {
				opts.OnStateChange(from.String(), to.String())
			}
		},
	})
	return f
}

var errClientGone = errors.New("client went away")

// Allow implements Limiter; the error is always nil.
func (f *Failover) Allow(ctx context.Context, b Bucket, cost int64) (Decision, error) {
	return f.Decide(ctx, b, cost), nil
}

// Decide returns the primary's decision, or the failure mode's when the
// primary cannot answer within the deadline or the breaker is open.
func (f *Failover) Decide(ctx context.Context, b Bucket, cost int64) Decision {
	done, err := f.breaker.Allow()
	if err != nil {
		return f.fallback(b, cost)
	}
	if f.breaker.State() == gobreaker.StateHalfOpen {
		// This request is the probe: answer it locally now and let the
		// probe finish in the background.
		f.probes.Add(1)
		go func() {
			_, err := f.call(context.Background(), b, cost)
			f.record(err)
			done(err)
		}()
		return f.fallback(b, cost)
	}
	f.waited.Add(1)
	d, err := f.call(ctx, b, cost)
	if err != nil && ctx.Err() != nil {
		err = errClientGone
	}
	f.record(err)
	done(err)
	if err != nil {
		return f.fallback(b, cost)
	}
	return d
}

// call asks the primary with the deadline.
func (f *Failover) call(ctx context.Context, b Bucket, cost int64) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	start := time.Now()
	d, err := f.primary.Allow(ctx, b, cost)
	cancel()
	if f.opts.ObservePrimary != nil {
		f.opts.ObservePrimary(time.Since(start), err)
	}
	return d, err
}

// fallback decides by the bucket's failure mode.
func (f *Failover) fallback(b Bucket, cost int64) Decision {
	switch b.FailureMode {
	case snapshot.FailOpen:
		return Decision{Allowed: true, Limit: int64(b.Capacity), Remaining: int64(b.Capacity), Source: SourceFailOpen}
	case snapshot.FailClosed:
		return Decision{Limit: int64(b.Capacity), RetryAfter: f.opts.FailClosedRetryAfter, Source: SourceFailClosed}
	}
	return f.local.Decide(b, cost)
}

// Run probes the primary in the background while the breaker is not closed,
// so that it closes when Redis is back even if no request arrives. It
// returns when ctx ends. Without a Pinger primary it does nothing: probes
// then ride on requests.
func (f *Failover) Run(ctx context.Context) {
	pinger, ok := f.primary.(Pinger)
	if !ok {
		return
	}
	tick := time.NewTicker(max(f.opts.OpenFor/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if f.breaker.State() == gobreaker.StateClosed {
			continue
		}
		done, err := f.breaker.Allow()
		if err != nil {
			continue // still open, or a probe is in flight
		}
		f.probes.Add(1)
		pctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
		start := time.Now()
		err = pinger.Ping(pctx)
		cancel()
		if f.opts.ObservePrimary != nil {
			f.opts.ObservePrimary(time.Since(start), err)
		}
		if err != nil && ctx.Err() != nil {
			err = errClientGone
		}
		f.record(err)
		done(err)
	}
}

// record keeps err as the last error, unless it says nothing about the
// primary. It runs before the breaker hears of err, so OnStateChange sees it.
func (f *Failover) record(err error) {
	if err != nil && !errors.Is(err, errClientGone) {
		f.lastErr.Store(errBox{err})
	}
}

// LastError is the primary's most recent error (nil if it never failed),
// for logs: OnStateChange("closed", "open") can say why the breaker opened.
func (f *Failover) LastError() error {
	if b, ok := f.lastErr.Load().(errBox); ok {
		return b.err
	}
	return nil
}

// Waited is the number of requests that waited for the primary (at most
// the deadline); Probes the number of background probes. Once the breaker
// is open, Waited stays still until it closes again.
func (f *Failover) Waited() int64 { return f.waited.Load() }

// Probes is the number of background probes sent to the primary.
func (f *Failover) Probes() int64 { return f.probes.Load() }

// State is the breaker state: "closed", "open" or "half-open".
func (f *Failover) State() string {
	return f.breaker.State().String()
}
