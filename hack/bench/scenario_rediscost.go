package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scenarioRedisCost (3): Redis round trips and script calls per decision
// for each Redis-backed mode, on the skewed tenant mix and on the hot
// tenant alone at its share of the same rate.
func (h *harness) scenarioRedisCost(ctx context.Context) error {
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	res := &RedisCostResult{Mix: mix.describe(), Rule: generousRule(false).String() + " (prefetch mode: + hotKey prefetch Auto)"}
	h.res.RedisCost = res
	for _, m := range limiterModes {
		if !m.redis {
			continue
		}
		rm, err := h.redisCost(ctx, m, mix)
		if rm != nil {
			res.Modes = append(res.Modes, *rm)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

func (h *harness) redisCost(ctx context.Context, m limiterMode, mix tenantMix) (*RedisCostMode, error) {
	rs, err := h.startRedis(ctx, "redis-cost-"+m.name)
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-cost-" + m.name, rules: manifests(generousRule(m.prefetch)), redisAddr: rs.Addr(), extra: m.flags})
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	if _, err := h.load(ctx, loadSpec{name: "warm-up", url: gw.url + "/bench", rate: 1000, dur: h.plan.Warmup, mix: mix}); err != nil {
		return nil, err
	}
	rc := rs.client()
	defer rc.Close()
	measure := func(mx tenantMix, rate int) (*RedisCostRun, error) {
		return h.redisCostRun(ctx, gw, rc, rs.Pid(), loadSpec{name: m.name, url: gw.url + "/bench", rate: rate, dur: h.plan.CostDur, mix: mx})
	}
	rm := &RedisCostMode{Mode: m.name}
	if rm.Mix, err = measure(mix, h.plan.CostRate); err != nil {
		return rm, err
	}
	hotRate := int(float64(h.plan.CostRate) * h.plan.HotShare)
	if rm.Hot, err = measure(oneTenant(hotTenant), hotRate); err != nil {
		return rm, err
	}
	for _, x := range []struct {
		what string
		r    *RedisCostRun
	}{{"mix", rm.Mix}, {"hot only", rm.Hot}} {
		h.logf("%-8s %-8s %5d req/s: %.4f round trips/decision, %.4f script calls/decision (Redis counted %.4f), gateway %.1f µs CPU/decision, redis-server %.1f µs",
			m.name, x.what, x.r.Rate, x.r.RoundTripsPerDec, x.r.CommandsPerDec, x.r.ServerCallsPerDec, x.r.CPUPerDecision, x.r.RedisCPUPerDecision)
	}
	return rm, nil
}

// redisCostRun measures one load on gw: round trips, script calls and CPU
// per decision, on the gateway's counters and Redis's INFO commandstats.
func (h *harness) redisCostRun(ctx context.Context, gw *gatewayProc, rc *redis.Client, redisPid int, spec loadSpec) (*RedisCostRun, error) {
	if err := sleep(ctx, 300*time.Millisecond); err != nil { // let prefetched tokens expire
		return nil, err
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	rcpu0, _ := cpuTime(redisPid)
	r, d, err := h.loadOn(ctx, gw, spec)
	if err != nil {
		return nil, err
	}
	rcpu1, _ := cpuTime(redisPid)
	calls, err := scriptCalls(ctx, rc)
	if err != nil {
		return nil, err
	}
	run := &RedisCostRun{
		Rate: spec.rate, Decisions: d.decisions, RoundTrips: d.roundTrips, Commands: d.commands, ServerScriptCalls: calls,
		RoundTripsPerDec:    ratio4(d.roundTrips, d.decisions),
		CommandsPerDec:      ratio4(d.commands, d.decisions),
		ServerCallsPerDec:   ratio4(float64(calls), d.decisions),
		CPUPerDecision:      cpuPer(d.cpu, d.decisions),
		RedisCPUPerDecision: cpuPer(rcpu1-rcpu0, d.decisions),
		P99:                 r.P99, Codes: r.Codes,
	}
	return run, nil
}

func ratio4(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 4)
}
