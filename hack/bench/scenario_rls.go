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

// scenarioRLS (8): the Envoy rate limit service (gRPC ShouldRateLimit)
// driven closed-loop by RLSStreams callers over one shared HTTP/2
// connection, as Envoy sends them, with and without Redis batching.
func (h *harness) scenarioRLS(ctx context.Context) error {
	// As in the latency scenario: the callers and Redis on the other CPUs,
	// the gateway and the floor each alone on the measured one.
	restore, err := h.pin.pinSelf()
	if err != nil {
		return err
	}
	defer restore()
	h.logf("%s", h.pin.describe())
	res := &RLSResult{Streams: h.plan.RLSStreams, Rule: rlsRule.String(),
		Mix: newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare).describe()}
	h.res.RLS = res
	for _, m := range limiterModes {
		if m.name != "batched" && m.name != "classic" {
			continue
		}
		run, err := h.rlsRun(ctx, m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		res.Modes = append(res.Modes, *run)
		h.logf("%-8s %6.0f decisions/s, p99 %.2f ms, gateway %.1f µs CPU/decision (%.0f decisions per CPU-second, %.2f× the reference), %.3f script calls/decision",
			m.name, run.PerSecond, run.P99, run.CPUPerDecision, run.PerCPUSecond, run.VsReference, run.ScriptCallsPerDec)
	}
	floor, err := h.rlsFloor(ctx)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	res.Floor = floor
	for i := range res.Modes {
		if floor.CPUPerDecision > 0 {
			res.Modes[i].VsFloor = round(res.Modes[i].CPUPerDecision/floor.CPUPerDecision, 2)
		}
	}
	h.logf("floor    %6.0f calls/s, p99 %.2f ms, %.1f µs CPU/call (a grpc-go server answering a constant OK)", floor.PerSecond, floor.P99, floor.CPUPerDecision)
	return nil
}

// rlsRun measures one limiter mode on a fresh Redis and gateway.
func (h *harness) rlsRun(ctx context.Context, m limiterMode) (*RLSRun, error) {
	rs, err := h.startRedis(ctx, "redis-rls-"+m.name)
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	flags := append([]string{"--rls-listen", fmt.Sprintf("127.0.0.1:%d", port), "--redis-timeout", "100ms"}, m.flags...)
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-rls-" + m.name, rules: manifests(rlsRule), redisAddr: rs.Addr(), extra: flags, pin: true})
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	client, closeConn, err := rlsClient(ctx, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	defer closeConn()
	h.driveRLS(ctx, client, h.plan.Warmup) // connections, pools, caches

	rc := rs.client()
	defer rc.Close()
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	rcpu0, _ := cpuTime(rs.Pid())
	var (
		lat     []time.Duration
		failed  int64
		elapsed time.Duration
	)
	d, err := gw.measure(ctx, func() error {
		t0 := time.Now()
		lat, failed = h.driveRLS(ctx, client, h.plan.RLSDur)
		elapsed = time.Since(t0)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rcpu1, _ := cpuTime(rs.Pid())
	calls, err := scriptCalls(ctx, rc)
	if err != nil {
		return nil, err
	}
	run := newRLSRun(m.name, lat, failed, elapsed, d, calls, rcpu1-rcpu0)
	if run.Profile, err = h.rlsProfile(ctx, gw, client, m.name); err != nil {
		h.logf("rls %s: no CPU profile: %v", m.name, err)
	}
	return run, nil
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

// driveRLS runs RLSStreams closed-loop callers for d, each over its own
// Zipf tenant mix, and returns the latencies of the successful calls and the
// number of failed ones.
func (h *harness) driveRLS(ctx context.Context, client rlsv3.RateLimitServiceClient, d time.Duration) ([]time.Duration, int64) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		all    []time.Duration
		failed int64
	)
	deadline := time.Now().Add(d)
	for i := range h.plan.RLSStreams {
		mix := newZipfMix(h.cfg.seed+int64(i), h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant"}, {Key: "route", Value: "bench"}},
			}}}
			lat := make([]time.Duration, 0, 1<<12)
			var bad int64
			for time.Now().Before(deadline) && ctx.Err() == nil {
				req.Descriptors[0].Entries[0].Value = mix.next()
				start := time.Now()
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
