package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// scenarioThroughput (2): the highest offered rate one gateway sustains per
// limiter mode, with p99 ≤ 10ms and ≤ 1% errors; classic (one EVALSHA per
// request) is the baseline. Each mode is also profiled at a fixed rate.
func (h *harness) scenarioThroughput(ctx context.Context) error {
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	res := &ThroughputResult{Mix: mix.describe()}
	h.res.Throughput = res
	for _, m := range limiterModes {
		tm, err := h.ceiling(ctx, m, mix)
		if tm != nil {
			res.Modes = append(res.Modes, *tm)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	base := res.Modes[0]
	for i := range res.Modes {
		m := &res.Modes[i]
		m.CeilingVs = ratio(float64(m.Ceiling), float64(base.Ceiling))
		m.CPUVs = ratio(m.CeilingCPU, base.CeilingCPU)
	}
	return nil
}

// ceiling steps the offered rate up until a step fails.
func (h *harness) ceiling(ctx context.Context, m limiterMode, mix tenantMix) (*ThroughputMode, error) {
	var addr string
	if m.redis {
		rs, err := h.startRedis(ctx, "redis-"+m.name)
		if err != nil {
			return nil, err
		}
		defer rs.Kill()
		addr = rs.Addr()
	}
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-" + m.name, rules: manifests(generousRule(m.prefetch)), redisAddr: addr, extra: m.flags})
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	tm := &ThroughputMode{Mode: m.name, Flags: m.describe(), ReadyAfterS: round(gw.readyAfter.Seconds(), 3)}
	if _, err := h.load(ctx, loadSpec{name: "warm-up", url: gw.url + "/bench", rate: 1000, dur: h.plan.Warmup, mix: mix}); err != nil {
		return nil, err
	}
	tm.HitTopRate = true
	for _, rate := range h.plan.CeilingRates {
		st, err := h.ceilingStep(ctx, gw, m.name, rate, mix)
		if err != nil {
			return tm, err
		}
		tm.Steps = append(tm.Steps, st)
		if !st.Pass {
			tm.StoppedBy, tm.HitTopRate = st.Why, false
			break
		}
		tm.Ceiling, tm.CeilingCPU, tm.Decisions = rate, st.CPUPerDecision, st.Decisions
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return tm, err
		}
	}
	if tm.HitTopRate {
		tm.StoppedBy = "every rate tried passed"
	}
	return tm, h.profileMode(ctx, gw, m.name, mix, tm)
}

// ceilingStep offers rate to gw for one step and judges it against the
// plan's p99 and error bounds.
func (h *harness) ceilingStep(ctx context.Context, gw *gatewayProc, name string, rate int, mix tenantMix) (ThroughputStep, error) {
	r, d, err := h.loadOn(ctx, gw, loadSpec{name: name, url: gw.url + "/bench", rate: rate, dur: h.plan.CeilingDur, mix: mix})
	if err != nil {
		return ThroughputStep{}, err
	}
	st := ThroughputStep{Load: r, Decisions: d.decisions, CPUPerDecision: cpuPer(d.cpu, d.decisions), Pass: true}
	switch {
	case r.P99 > ms(h.plan.CeilingP99):
		st.Pass, st.Why = false, fmt.Sprintf("p99 %.1fms > %.0fms", r.P99, ms(h.plan.CeilingP99))
	case r.BadFrac > h.plan.CeilingBadMax:
		st.Pass, st.Why = false, fmt.Sprintf("%.1f%% errors or non-2xx/429 (first: %s)", 100*r.BadFrac, r.FirstErr)
	case r.SentRate < 0.95*float64(rate):
		st.Pass, st.Why = false, fmt.Sprintf("the load generator sent only %.0f/s: the machine is saturated", r.SentRate)
	}
	verdict := "pass"
	if !st.Pass {
		verdict = "FAIL: " + st.Why
	}
	h.logf("%-8s %5d req/s  p50 %.3f p99 %.3f ms  bad %.2f%%  CPU %.1f µs/decision  %s", name, rate, r.P50, r.P99, 100*r.BadFrac, st.CPUPerDecision, verdict)
	return st, nil
}

// profileMode profiles gw at a fixed rate into tm.Profile; a profile
// without samples is logged and left out.
func (h *harness) profileMode(ctx context.Context, gw *gatewayProc, name string, mix tenantMix, tm *ThroughputMode) error {
	p, err := h.profile(ctx, gw, name, mix)
	if errors.Is(err, errNoSamples) {
		h.logf("%-8s ceiling %d req/s at %.1f µs CPU/decision; no profile: %v", name, tm.Ceiling, tm.CeilingCPU, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	tm.Profile = p
	h.logf("%-8s ceiling %d req/s at %.1f µs CPU/decision; profile at %d req/s: %.1f µs CPU/request, limiter %.0f%% of it ≈ %.1f µs/decision",
		name, tm.Ceiling, tm.CeilingCPU, p.Rate, p.CPUPerRequest, 100*p.LimiterShare, p.LimiterPerDec)
	return nil
}
