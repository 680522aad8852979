package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/lib/ticker"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Accuracy rule: as engine_test's, a burst of 200 and 2,000/s on one bucket.
const (
	accCapacity  = 200
	accPerSecond = 2000
	accOffered   = 3 * accPerSecond // decisions/s offered in all
	accBin       = 50 * time.Millisecond
)

// oneRule serves the same rule for every tenant and route.
type oneRule struct{ r snapshot.Rule }

func (o *oneRule) Lookup(string, string) *snapshot.Rule { return &o.r }

func (o *oneRule) Extra(_, _ string, _ snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule {
	return dst
}

func (o *oneRule) LookupClaims(string, string, snapshot.Claims) *snapshot.Rule { return &o.r }

// scenarioAccuracy (4): N limiter instances in this process, each with its
// own Redis client, Batcher and Cache (the gateway's chain), on one bucket:
// admitted vs ideal with Redis healthy, with prefetch Auto, and during an
// outage (Failover to local buckets sized 1/N).
func (h *harness) scenarioAccuracy(ctx context.Context) error {
	res := &AccuracyResult{
		Rule: fmt.Sprintf("*/*: capacity %d, %d/s, one bucket", accCapacity, accPerSecond),
		Load: fmt.Sprintf("%d decisions/s offered in all (3x the rate), evenly over the instances, open loop (up to 64 in flight per instance)", accOffered),
		Note: "healthy and prefetch: the gateway's chain (limiter.NewChain) with long deadlines, window bracketed by Redis TIME; slow: the default deadlines (5ms, max wait 100ms) while redis-server is frozen (SIGSTOP) for 80ms every 300ms; " +
			"outage: Failover (deadline 50ms, 3 failures open the breaker for 200ms) over the same chain, local buckets sized 1/N, " +
			"redis-server killed with SIGKILL after a healthy start, ideal = capacity + rate × the outage window (local clock)",
	}
	h.res.Accuracy = res
	for _, k := range accKinds {
		for _, n := range h.plan.AccuracyInstances {
			ac, err := h.accuracyCase(ctx, k, n)
			if err != nil {
				return fmt.Errorf("%s with %d instances: %w", k.name, n, err)
			}
			res.Cases = append(res.Cases, *ac)
			h.logf("%-8s N=%-2d admitted %d of %d decisions, ideal %.0f..%.0f: error %+.2f%% (target ±%.0f%%) %s",
				k.name, n, ac.Admitted, ac.Decisions, ac.IdealLow, ac.IdealHigh, 100*ac.Error, 100*ac.Target, okMark(ac.Within))
		}
	}
	return nil
}

func okMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// accRun counts one case's decisions.
type accRun struct {
	start               time.Time
	decisions, admitted atomic.Int64
	// windowFrom/To (ns since start) select the decisions counted in
	// windowAdmitted; the outage window is only known while it runs.
	windowFrom, windowTo atomic.Int64
	windowAdmitted       atomic.Int64
	bins                 []atomic.Int64
}

// newAccRun returns a run with bins for a load of length d and no window
// yet.
func newAccRun(d time.Duration) *accRun {
	run := &accRun{bins: make([]atomic.Int64, int((d+2*time.Second)/accBin))}
	run.windowFrom.Store(math.MaxInt64)
	run.windowTo.Store(math.MaxInt64)
	return run
}

func (r *accRun) record(allowed bool) {
	t := int64(time.Since(r.start))
	r.decisions.Add(1)
	if !allowed {
		return
	}
	r.admitted.Add(1)
	if t >= r.windowFrom.Load() && t < r.windowTo.Load() {
		r.windowAdmitted.Add(1)
	}
	if i := int(t / int64(accBin)); i < len(r.bins) {
		r.bins[i].Add(1)
	}
}

// accKind is one kind of accuracy case: how each instance's chain is set up
// and what happens to Redis while the load runs.
type accKind struct {
	name   string
	target float64 // the error allowed, a fraction of the ideal
	// prefetch sets the rule's prefetch to Auto.
	prefetch bool
	// The chain's deadlines and breaker (zero: the chain's defaults).
	timeout, maxWait time.Duration
	failuresToOpen   uint32
	openFor          time.Duration
	// stall freezes Redis now and then (stallRedis); outage kills it after
	// a healthy start and counts only what the fallback admits.
	stall, outage bool
}

// accKinds are the accuracy cases, in the order they run. Outside the
// outage case the deadline is long unless a case is about deadlines, so a
// loaded machine measures Redis decisions only.
var accKinds = []accKind{
	{name: "healthy", target: 0.02, timeout: time.Second, maxWait: 2 * time.Second},
	// The target is the rule's error budget.
	{name: "prefetch", target: 0.05, prefetch: true, timeout: time.Second, maxWait: 2 * time.Second},
	// The gateway's defaults: Redis stalls make calls miss them.
	{name: "slow", target: 0.05, stall: true, timeout: 5 * time.Millisecond, maxWait: 100 * time.Millisecond},
	{name: "outage", target: 0.10, outage: true, timeout: 50 * time.Millisecond, maxWait: 100 * time.Millisecond,
		failuresToOpen: 3, openFor: 200 * time.Millisecond},
}

// accuracyCase runs case k with n instances on a Redis of its own.
func (h *harness) accuracyCase(ctx context.Context, k accKind, n int) (*AccuracyCase, error) {
	rs, err := h.startRedis(ctx, fmt.Sprintf("redis-accuracy-%s-%d", k.name, n))
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	rc := rs.client()
	defer rc.Close()

	engines, closeEngines := k.engines(ctx, rs.Addr(), n)
	defer closeEngines()
	// Warm up on another bucket: connections open, script loaded.
	for _, e := range engines {
		if _, _, err := e.Decide(ctx, "warm-up", "r", 1); err != nil {
			return nil, err
		}
	}

	ac := &AccuracyCase{Case: k.name, Instances: n, Target: k.target}
	if k.prefetch {
		// Auto: 5% of max(capacity, one second of refill) over N.
		ac.Batch = int64(math.Floor(0.05 * math.Max(accCapacity, accPerSecond) / float64(n)))
	}
	window := h.plan.AccuracyWindow
	if k.outage {
		err = accOutage(ctx, rs, engines, window, ac)
	} else {
		err = accSteady(ctx, rs, rc, engines, window, k.stall, ac)
	}
	if err != nil {
		return nil, err
	}
	ac.score()
	return ac, nil
}

// engines starts n decision engines, each over a chain of its own (the
// gateway's) to the Redis at addr, serving one rule. The function returned
// stops and closes them.
func (k accKind) engines(ctx context.Context, addr string, n int) ([]*decision.Engine, func()) {
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: accCapacity, RefillTokens: accPerSecond, RefillPeriodMs: 1000}}
	if k.prefetch {
		rule.r.Prefetch = snapshot.PrefetchAuto
	}
	bgCtx, cancelBG := context.WithCancel(ctx)
	closers := []func(){cancelBG}
	var engines []*decision.Engine
	for range n {
		client := newRedisClient(addr)
		chain := limiter.NewChain(limiter.ChainOptions{
			Client: client, Replicas: func() int { return n }, Coalesce: true, EmptyBucketCache: true,
			Timeout: k.timeout, MaxWait: k.maxWait, FailuresToOpen: k.failuresToOpen, OpenFor: k.openFor,
		})
		go chain.Run(bgCtx)
		closers = append(closers, func() { _ = chain.Close() }, func() { _ = client.Close() })
		engines = append(engines, decision.New(decision.Options{Rules: rule, Limiter: chain, Replicas: func() int { return n }}))
	}
	return engines, func() {
		for _, c := range closers {
			c()
		}
	}
}

// accLoad is the open-loop load of one case, split evenly over the engines.
type accLoad struct {
	running context.Context // done once the load stops
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// startAccLoad starts the load, counting into run from now on.
func startAccLoad(ctx context.Context, engines []*decision.Engine, run *accRun) *accLoad {
	l := &accLoad{}
	l.running, l.stop = context.WithCancel(ctx)
	run.start = time.Now()
	for _, e := range engines {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			paceDecisions(ctx, l.running, e, float64(accOffered)/float64(len(engines)), run)
		}()
	}
	return l
}

// halt stops the load and waits for the decisions in flight.
func (l *accLoad) halt() {
	l.stop()
	l.wg.Wait()
}

// accSteady runs the load for window with Redis up (frozen now and then
// with stall), and sets the case's window from Redis TIME: the ideal is
// bracketed by the clock read before the load stops and after it has.
func accSteady(ctx context.Context, rs *redisServer, rc *redis.Client, engines []*decision.Engine, window time.Duration, stall bool, ac *AccuracyCase) error {
	run := newAccRun(window)
	t0, err := rc.Time(ctx).Result()
	if err != nil {
		return err
	}
	load := startAccLoad(ctx, engines, run)
	if stall {
		go stallRedis(load.running, rs)
	}
	err = sleep(ctx, window)
	tStop, _ := rc.Time(context.Background()).Result()
	load.halt()
	t1, _ := rc.Time(context.Background()).Result()
	if err != nil {
		return err
	}
	end := time.Since(run.start)
	ac.Seconds = round(tStop.Sub(t0).Seconds(), 3)
	ac.IdealLow = round(accCapacity+accPerSecond*tStop.Sub(t0).Seconds(), 1)
	ac.IdealHigh = round(accCapacity+accPerSecond*t1.Sub(t0).Seconds(), 1)
	ac.Admitted, ac.Decisions = run.admitted.Load(), run.decisions.Load()
	ac.Series = run.series(ac.Case, end, 0)
	return nil
}

// accOutage runs the load with Redis up for a while, kills it and goes on
// for window; only what is admitted after the kill counts, against a new
// burst and the refill over the outage (local clock).
func accOutage(ctx context.Context, rs *redisServer, engines []*decision.Engine, window time.Duration, ac *AccuracyCase) error {
	pre := max(window/3, 300*time.Millisecond)
	run := newAccRun(pre + window)
	load := startAccLoad(ctx, engines, run)
	if err := sleep(ctx, pre); err != nil {
		load.halt()
		return err
	}
	rs.Kill()
	kill := time.Since(run.start)
	run.windowFrom.Store(int64(kill))
	err := sleep(ctx, window)
	end := time.Since(run.start)
	run.windowTo.Store(int64(end))
	load.halt()
	if err != nil {
		return err
	}
	secs := (end - kill).Seconds()
	ideal := accCapacity + accPerSecond*secs
	ac.Seconds, ac.IdealLow, ac.IdealHigh = round(secs, 3), round(ideal, 1), round(ideal, 1)
	ac.Admitted, ac.Decisions = run.windowAdmitted.Load(), run.decisions.Load()
	ac.Series = run.series(ac.Case, end, kill)
	return nil
}

// score sets the error against the ideal range, the ratio to its middle
// and whether the error is within the target.
func (ac *AccuracyCase) score() {
	got := float64(ac.Admitted)
	switch {
	case got < ac.IdealLow:
		ac.Error = round((got-ac.IdealLow)/ac.IdealLow, 4)
	case got > ac.IdealHigh:
		ac.Error = round((got-ac.IdealHigh)/ac.IdealHigh, 4)
	}
	ac.Ratio = round(got/((ac.IdealLow+ac.IdealHigh)/2), 4)
	ac.Within = math.Abs(ac.Error) <= ac.Target
}

// paceDecisions offers rate decisions/s to e until running is done: each
// due decision runs in its own goroutine (open loop) with ctx, at most 64
// at once.
func paceDecisions(ctx, running context.Context, e *decision.Engine, rate float64, run *accRun) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	start, sent := time.Now(), 0
	ticker.Every(running, time.Millisecond, func() {
		due := int(time.Since(start).Seconds()*rate) - sent
		for range due {
			select {
			case sem <- struct{}{}:
			case <-running.Done():
				return
			}
			sent++
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, _, err := e.Decide(ctx, "acc", "r", 1)
				run.record(err == nil && d.Allowed)
				<-sem
			}()
		}
	})
}

// series is a time series for a plot: admitted per bin, the ideal
// cumulative admitted count at the end of each bin, or p99 latency per bin.
type series struct {
	Bin      time.Duration
	Admitted []int64
	Ideal    []float64
	P99      []float64
	Events   []event
}

type event struct {
	At    time.Duration
	Label string
}

func (r *accRun) series(kind string, end, kill time.Duration) *series {
	nb := int(end / accBin)
	s := &series{Bin: accBin}
	for i := 0; i < nb && i < len(r.bins); i++ {
		s.Admitted = append(s.Admitted, r.bins[i].Load())
		t := time.Duration(i+1) * accBin
		ideal := accCapacity + accPerSecond*t.Seconds()
		if kind == "outage" && t > kill {
			// The fallback starts from fresh local buckets: a new burst.
			ideal += accCapacity
		}
		s.Ideal = append(s.Ideal, ideal)
	}
	if kind == "outage" {
		s.Events = append(s.Events, event{kill, "redis-server killed"})
	}
	return s
}

// Redis stalls in the "slow" accuracy case: frozen (SIGSTOP) for stallFor
// every stallEvery, so that calls written during a stall miss the gateway's
// 5ms deadline, and the longer stalls outlast the PING that checks them.
const (
	stallEvery = 300 * time.Millisecond
	stallFor   = 80 * time.Millisecond
)

// stallRedis freezes and resumes rs until ctx is done.
func stallRedis(ctx context.Context, rs interface {
	Pause()
	Resume()
}) {
	ticker.Every(ctx, stallEvery, func() {
		rs.Pause()
		time.Sleep(stallFor)
		rs.Resume()
	})
}
