package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Envoy's Go ratelimit service on the reference machine: the figures the
// rls scenario compares with.
const (
	refRLSDecisionsPerSecond = 8000
	refRLSCPUMicrosPerDec    = 117
	refRLSRedisPerDecision   = 2
)

// rlsRule is every tenant's rule in the rls scenario: small enough that
// some calls are over the limit.
var rlsRule = ruleSpec{name: "rls-all", tenant: "*", route: "*", capacity: 100, perSecond: 50}

// rlsRounds is how many parts the measured time of the rls scenario is
// cut into: each target (a limiter mode's gateway, the floor) is driven in
// turn for one part, round after round, so that a machine that gets busier
// or quieter during the run weighs on the gateway and on the floor alike.
const rlsRounds = 4

// scenarioRLS (8): the Envoy rate limit service (gRPC ShouldRateLimit)
// driven by RLSStreams callers over one shared HTTP/2 connection, as Envoy
// sends them, closed-loop and then at steady rates (rlsSteadyPasses): with
// and without Redis batching and without Redis at all (--limiter=local:
// what the service costs above the floor before the Redis path), next to
// the floor (a grpc-go server answering a constant OK), in interleaved
// rounds.
func (h *harness) scenarioRLS(ctx context.Context) error {
	// As in the latency scenario: the callers and Redis on the other CPUs,
	// the gateways and the floor each alone on the measured one (only the
	// one being driven is busy).
	restore, err := h.pin.pinSelf()
	if err != nil {
		return err
	}
	defer restore()
	h.logf("%s", h.pin.describe())
	res := &RLSResult{Streams: h.plan.RLSStreams, Rule: rlsRule.String(),
		Mix: newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare).describe()}
	h.res.RLS = res
	targets, err := h.rlsTargets(ctx)
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	if err != nil {
		return err
	}
	for _, t := range targets {
		h.driveRLS(ctx, t.client, h.plan.Warmup, 0) // connections, pools, caches
	}
	if res.RLSPass, err = h.rlsPass(ctx, targets, h.plan.RLSDur, RLSPass{}); err != nil {
		return err
	}
	k := 0 // the gateways' runs are in the order of targets
	for _, t := range targets {
		if t.gw == nil {
			continue
		}
		run := &res.Modes[k]
		k++
		if run.Profile, err = h.rlsProfile(ctx, t.gw, t.client, t.name); err != nil {
			h.logf("rls %s: no CPU profile: %v", t.name, err)
		}
	}
	h.rlsCompare(res.RLSPass)
	for _, steady := range rlsSteadyPasses(h.plan, res.RLSPass) {
		p, err := h.rlsPass(ctx, targets, rlsPacedDur(h.plan), steady)
		if err != nil {
			return err
		}
		res.Steady = append(res.Steady, p)
		h.rlsCompare(p)
	}
	return nil
}

// rlsSteadyPasses are the steady passes to run (their rates): at the
// reference's rate (plan.RLSRate), and a busy one at plan.RLSBusy of the
// calls per second the batched (default) mode answered in its closed loop,
// rounded down to two significant digits.
//
// A closed loop gives each target as many calls as it answers, and an
// unsaturated process's CPU per call falls as its calls per second grow
// (every wake-up and system call is shared by more calls), so comparing
// closed loops partly measures which target got more calls; the busy pass
// compares them near the default mode's ceiling, at the same work.
func rlsSteadyPasses(p plan, closed RLSPass) []RLSPass {
	var passes []RLSPass
	if p.RLSRate > 0 {
		passes = append(passes, RLSPass{Rate: p.RLSRate})
	}
	if m := closed.batched(); m != nil {
		if busy := twoDigits(int(p.RLSBusy * m.PerSecond)); busy > 0 {
			passes = append(passes, RLSPass{Rate: busy, Busy: p.RLSBusy})
		}
	}
	return passes
}

// batched is the pass's run of the batched (default) mode; nil when it has
// none.
func (p RLSPass) batched() *RLSRun {
	for i := range p.Modes {
		if p.Modes[i].Mode == "batched" {
			return &p.Modes[i]
		}
	}
	return nil
}

// twoDigits rounds n ≥ 0 down to two significant digits (14417: 14000).
func twoDigits(n int) int {
	unit := 1
	for n/unit >= 100 {
		unit *= 10
	}
	return n / unit * unit
}

// rlsPass measures every target under the same callers, closed-loop
// (pass.Rate 0) or at a steady rate, in interleaved rounds: the gateways'
// runs in the order of targets, and the floor's.
func (h *harness) rlsPass(ctx context.Context, targets []*rlsTarget, dur time.Duration, pass RLSPass) (RLSPass, error) {
	rate := pass.Rate
	for _, t := range targets {
		if err := t.begin(ctx); err != nil {
			return pass, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	part := dur / rlsRounds
	for round := range rlsRounds {
		for i := range targets {
			// Each round starts with the next target, so that none always
			// runs right after another.
			t := targets[(round+i)%len(targets)]
			if err := t.drive(ctx, h, part, rate); err != nil {
				return pass, fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}
	for _, t := range targets {
		run, err := t.finish(ctx)
		if err != nil {
			return pass, fmt.Errorf("%s: %w", t.name, err)
		}
		if t.gw == nil {
			pass.Floor = run
			continue
		}
		pass.Modes = append(pass.Modes, *run)
	}
	if f := pass.Floor; f != nil && f.CPUPerDecision > 0 {
		for i := range pass.Modes {
			pass.Modes[i].VsFloor = round(pass.Modes[i].CPUPerDecision/f.CPUPerDecision, 2)
		}
	}
	return pass, nil
}

// rlsPacedDur is each steady pass's measured time: half the closed loops',
// which keeps `make bench` near 11 minutes; at 8,000 calls/s that is still
// 80,000 calls per target.
func rlsPacedDur(p plan) time.Duration { return p.RLSDur / 2 }

// rlsCompare logs a pass's figures.
func (h *harness) rlsCompare(p RLSPass) {
	h.logf("%s:", p.name())
	for _, run := range p.Modes {
		h.logf("%-8s %6.0f decisions/s, p99 %.2f ms, gateway %.1f µs CPU/decision (%.0f decisions per CPU-second, %.2f× the reference, %.2f× the floor), %.3f script calls/decision",
			run.Mode, run.PerSecond, run.P99, run.CPUPerDecision, run.PerCPUSecond, run.VsReference, run.VsFloor, run.ScriptCallsPerDec)
	}
	if f := p.Floor; f != nil {
		h.logf("floor    %6.0f calls/s, p99 %.2f ms, %.1f µs CPU/call (a grpc-go server answering a constant OK)", f.PerSecond, f.P99, f.CPUPerDecision)
	}
}

// name says how the pass drove the targets.
func (p RLSPass) name() string {
	switch {
	case p.Rate == 0:
		return "closed loop"
	case p.Busy > 0:
		return fmt.Sprintf("steady %d/s (%.0f %% of batched's closed loop)", p.Rate, 100*p.Busy)
	}
	return fmt.Sprintf("steady %d/s", p.Rate)
}

// rlsTargets starts what the rls scenario measures: a gateway in each of
// the batched, classic and local modes, and the floor. On an error, the
// ones started are returned too, to be closed.
func (h *harness) rlsTargets(ctx context.Context) ([]*rlsTarget, error) {
	var targets []*rlsTarget
	for _, m := range limiterModes {
		if m.name != "batched" && m.name != "classic" && m.name != "local" {
			continue
		}
		t, err := h.rlsGateway(ctx, m)
		if err != nil {
			return targets, fmt.Errorf("%s: %w", m.name, err)
		}
		targets = append(targets, t)
	}
	floor, err := h.rlsFloor(ctx)
	if err != nil {
		return targets, fmt.Errorf("floor: %w", err)
	}
	return append(targets, floor), nil
}

// rlsTarget is one process the rls scenario drives: a gateway in one
// limiter mode (with its own Redis), or the floor. What its rounds measured
// adds up in it.
type rlsTarget struct {
	name   string
	client rlsv3.RateLimitServiceClient
	gw     *gatewayProc // nil for the floor
	rs     *redisServer // the gateway's Redis
	pid    int          // the floor's process
	close  func()

	lat     []time.Duration
	failed  int64
	elapsed time.Duration
	d       counters // the gateway's, or the floor's CPU and calls
	rcpu0   time.Duration
}

// rlsGateway starts a gateway in mode m with a Redis of its own.
func (h *harness) rlsGateway(ctx context.Context, m limiterMode) (_ *rlsTarget, err error) {
	t := &rlsTarget{name: m.name} // not the result: the deferred close needs it after a failed start
	var closers []func()
	t.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.rs, err = h.startRedis(ctx, "redis-rls-"+m.name); err != nil {
		return nil, err
	}
	closers = append(closers, func() { t.rs.Kill() })
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	flags := append([]string{"--rls-listen", fmt.Sprintf("127.0.0.1:%d", port), "--redis-timeout", "100ms"}, m.flags...)
	if t.gw, err = h.startGateway(ctx, gatewaySpec{name: "gw-rls-" + m.name, rules: manifests(rlsRule), redisAddr: t.rs.Addr(), extra: flags, pin: true}); err != nil {
		return nil, err
	}
	closers = append(closers, t.gw.stop)
	client, closeConn, err := rlsClient(ctx, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	closers = append(closers, closeConn)
	t.client = client
	return t, nil
}

// begin starts a pass's measured time: what t's rounds add up, Redis's
// statistics and CPU, from here.
func (t *rlsTarget) begin(ctx context.Context) error {
	t.lat, t.failed, t.elapsed, t.d = nil, 0, 0, counters{}
	if t.rs == nil {
		return nil
	}
	rc := t.rs.client()
	defer rc.Close()
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	t.rcpu0, _ = cpuTime(t.rs.Pid())
	return nil
}

// snapshot is what the target's process has spent so far.
func (t *rlsTarget) snapshot(ctx context.Context) (counters, error) {
	if t.gw != nil {
		return t.gw.counters(ctx)
	}
	cpu, err := cpuTime(t.pid)
	return counters{cpu: cpu}, err
}

// drive runs the callers against t for d and adds up what it cost.
func (t *rlsTarget) drive(ctx context.Context, h *harness, d time.Duration, rate int) error {
	c0, err := t.snapshot(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	lat, failed := h.driveRLS(ctx, t.client, d, rate)
	elapsed := time.Since(t0)
	c1, err := t.snapshot(ctx)
	if err != nil {
		return err
	}
	diff := c1.sub(c0)
	if t.gw == nil {
		diff.decisions = float64(len(lat)) // the floor counts no decisions
	}
	t.lat, t.failed, t.elapsed = append(t.lat, lat...), t.failed+failed, t.elapsed+elapsed
	t.d = t.d.add(diff)
	return nil
}

// finish turns the rounds into t's figures.
func (t *rlsTarget) finish(ctx context.Context) (*RLSRun, error) {
	if t.rs == nil {
		return newRLSRun("floor", t.lat, t.failed, t.elapsed, t.d, 0, 0), nil
	}
	rcpu1, _ := cpuTime(t.rs.Pid())
	rc := t.rs.client()
	defer rc.Close()
	calls, err := scriptCalls(ctx, rc)
	if err != nil {
		return nil, err
	}
	return newRLSRun(t.name, t.lat, t.failed, t.elapsed, t.d, calls, rcpu1-t.rcpu0), nil
}

// newRLSRun turns what one run measured into its figures.
func newRLSRun(mode string, lat []time.Duration, failed int64, elapsed time.Duration, d counters, calls int64, redisCPU time.Duration) *RLSRun {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return round(float64(lat[min(len(lat)-1, int(p*float64(len(lat))))])/1e6, 3)
	}
	run := &RLSRun{
		Mode: mode, Calls: int64(len(lat)), Failed: failed,
		PerSecond:           round(float64(len(lat))/elapsed.Seconds(), 0),
		P50:                 pct(0.50),
		P99:                 pct(0.99),
		CPUPerDecision:      cpuPer(d.cpu, d.decisions),
		ScriptCallsPerDec:   ratio4(float64(calls), d.decisions),
		RoundTripsPerDec:    ratio4(d.roundTrips, d.decisions),
		RedisCPUPerDecision: cpuPer(redisCPU, d.decisions),
	}
	if d.cpu > 0 {
		run.PerCPUSecond = round(d.decisions/d.cpu.Seconds(), 0)
		run.VsReference = round(run.PerCPUSecond/(1e6/refRLSCPUMicrosPerDec), 2)
	}
	return run
}

// driveRLS runs RLSStreams callers for d, each over its own Zipf tenant
// mix, and returns the latencies of the successful calls and the number of
// failed ones. With rate 0 each caller is a closed loop (the next call as
// soon as the last returns); otherwise they send rate calls per second
// between them, each call's latency counted from when it was due.
func (h *harness) driveRLS(ctx context.Context, client rlsv3.RateLimitServiceClient, d time.Duration, rate int) ([]time.Duration, int64) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		all    []time.Duration
		failed int64
	)
	t0 := time.Now()
	deadline := t0.Add(d)
	// With a rate, each caller sends every interval, its calls shifted
	// from the others' by an equal share of it.
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(h.plan.RLSStreams) / float64(rate))
	}
	for i := range h.plan.RLSStreams {
		mix := newZipfMix(h.cfg.seed+int64(i), h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
		due := t0.Add(interval * time.Duration(i) / time.Duration(h.plan.RLSStreams))
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant"}, {Key: "route", Value: "bench"}},
			}}}
			lat := make([]time.Duration, 0, 1<<12)
			var bad int64
			for ctx.Err() == nil {
				start := time.Now()
				if interval > 0 {
					if !due.Before(deadline) {
						break
					}
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					}
					start, due = due, due.Add(interval)
				} else if !start.Before(deadline) {
					break
				}
				req.Descriptors[0].Entries[0].Value = mix.next()
				if _, err := client.ShouldRateLimit(ctx, req); err != nil {
					bad++
					continue
				}
				lat = append(lat, time.Since(start))
			}
			mu.Lock()
			all, failed = append(all, lat...), failed+bad
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, failed
}

// rlsClient dials a rate limit service over one HTTP/2 connection, as Envoy
// does, once its health service reports SERVING.
func rlsClient(ctx context.Context, addr string) (rlsv3.RateLimitServiceClient, func(), error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	if err := waitServing(ctx, cc, 30*time.Second); err != nil {
		cc.Close()
		return nil, nil, fmt.Errorf("rate limit service not serving: %w", err)
	}
	return rlsv3.NewRateLimitServiceClient(cc), func() { cc.Close() }, nil
}

// waitServing waits until the gRPC health service reports SERVING.
func waitServing(ctx context.Context, cc *grpc.ClientConn, within time.Duration) error {
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(within)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("health %v", res.Status)
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
