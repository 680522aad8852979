package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

const (
	outageTenants   = 10
	outageCapacity  = 100
	outagePerSecond = 100
	outageTimeout   = 5 * time.Millisecond // the gateway's default --redis-timeout
	// openSettle: the gateway's count of requests that waited for Redis is
	// read this long after the breaker was seen open, so that a request
	// let through to Redis just before it opened is counted before, not
	// while open (it counts itself when its goroutine runs again).
	openSettle = 25 * time.Millisecond
)

// outageMarks are the moments of an outage run.
type outageMarks struct {
	begin, kill, open, local, restartScrape, restart, closed, end time.Time
}

// scenarioOutage (5): a gateway process at 2,500 req/s loses its Redis
// (SIGKILL) and gets it back (restart on the same port): time to breaker
// open, added latency before, during and after, and the admitted count
// against the rule while the local fallback decides.
func (h *harness) scenarioOutage(ctx context.Context) error {
	rs, err := h.startRedis(ctx, "redis-outage")
	if err != nil {
		return err
	}
	defer rs.Kill()
	rule := ruleSpec{name: "outage", tenant: "*", route: "*", capacity: outageCapacity, perSecond: outagePerSecond}
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-outage", rules: manifests(rule), redisAddr: rs.Addr()})
	if err != nil {
		return err
	}
	defer gw.stop()
	var tenants []string
	for i := range outageTenants {
		tenants = append(tenants, fmt.Sprintf("outage-%d", i))
	}
	mix := &roundRobin{tenants: tenants}
	rate := h.plan.OutageRate
	res := &OutageResult{
		Rate: rate, Rule: rule.String() + fmt.Sprintf(", %d tenants each sent %d req/s", outageTenants, rate/outageTenants),
		Flags:           "gateway defaults: --redis-timeout 5ms --breaker-failures 5 --breaker-open-for 500ms --replicas 1",
		SlowThresholdMs: ms(outageTimeout),
	}
	h.res.Outage = res

	// Baseline: direct to the upstream at the same rate.
	if _, err := h.load(ctx, loadSpec{name: "warm-up", url: gw.url + "/bench", rate: 1000, dur: h.plan.Warmup, mix: mix}); err != nil {
		return err
	}
	d, err := h.load(ctx, loadSpec{name: "direct", url: h.upstream + "/bench", rate: rate, dur: h.plan.OutagePhase, mix: mix})
	if err != nil {
		return err
	}
	res.DirectP99 = d.P99

	stop, wait := h.attack(ctx, loadSpec{name: "outage", url: gw.url + "/bench", rate: rate, mix: mix})
	defer stop()
	t, err := h.outagePhases(ctx, rs, gw, res)
	if err != nil {
		return err
	}
	stop()
	all := wait()
	t.end = time.Now()
	h.outageSummary(res, all, t)
	return nil
}

// outagePhases runs the outage under load: a phase before, the kill, the
// fallback until a phase after the kill, the restart, and a phase after the
// breaker closed. It fills in the gateway's counts over the outage.
func (h *harness) outagePhases(ctx context.Context, rs *redisServer, gw *gatewayProc, res *OutageResult) (outageMarks, error) {
	var t outageMarks
	phase := h.plan.OutagePhase
	t.begin = time.Now()
	if err := sleep(ctx, phase); err != nil {
		return t, err
	}
	m0, err := gw.metrics(ctx)
	if err != nil {
		return t, err
	}
	local0 := m0.sum("tollgate_gateway_decisions_total", `source="local"`)
	if err := h.killUntilOpen(ctx, rs, gw, res, &t, local0); err != nil {
		return t, err
	}
	if err := sleep(ctx, openSettle); err != nil {
		return t, err
	}
	mOpen, err := gw.metrics(ctx)
	if err != nil {
		return t, err
	}
	if err := sleep(ctx, t.kill.Add(phase).Sub(time.Now())); err != nil {
		return t, err
	}
	mRestart, err := gw.metrics(ctx)
	if err != nil {
		return t, err
	}
	t.restartScrape = time.Now()
	if err := rs.Restart(ctx); err != nil {
		return t, err
	}
	t.restart = time.Now()
	h.logf("redis-server restarted on the same port")
	if err := h.waitClosed(ctx, gw, res, &t); err != nil {
		return t, err
	}
	if err := sleep(ctx, phase); err != nil {
		return t, err
	}
	res.RedisCallsOpen = mRestart.sum("tollgate_gateway_redis_duration_seconds_count") - mOpen.sum("tollgate_gateway_redis_duration_seconds_count")
	res.WaitedOpen = mRestart.sum("tollgate_gateway_redis_waits_total") - mOpen.sum("tollgate_gateway_redis_waits_total")
	// Admitted by the local fallback from the kill to the restart (the
	// gateway's own count), against the rule's limit over that window:
	// each tenant's local bucket starts full (capacity/N, N=1) at the
	// first fallback decision and refills at rate/N.
	res.AdmittedDuring = int(mRestart.sum("tollgate_gateway_decisions_total", `result="allowed"`, `source="local"`) -
		m0.sum("tollgate_gateway_decisions_total", `result="allowed"`, `source="local"`))
	res.LimitDuring = float64(outageTenants) * (outageCapacity + outagePerSecond*t.restartScrape.Sub(t.kill).Seconds())
	res.AdmittedRatio = ratio(float64(res.AdmittedDuring), res.LimitDuring)
	return t, nil
}

// killUntilOpen kills Redis under load and waits for the gateway's breaker
// to open and for its first local decision (over local0), polling
// /metrics.
func (h *harness) killUntilOpen(ctx context.Context, rs *redisServer, gw *gatewayProc, res *OutageResult, t *outageMarks, local0 float64) error {
	h.logf("killing redis-server (SIGKILL) under %d req/s", res.Rate)
	rs.Kill()
	t.kill = time.Now()
	// Poll /metrics for the breaker and the first local decision.
	const poll = 5 * time.Millisecond
	res.PollMs = ms(poll)
	seen, err := waitMetrics(ctx, gw, poll, 20*time.Second,
		func(m promSamples) bool { return m.sum("tollgate_gateway_breaker_state", `state="open"`) == 1 },
		func(m promSamples) bool { return m.sum("tollgate_gateway_decisions_total", `source="local"`) > local0 })
	if err != nil {
		return fmt.Errorf("the breaker did not open within 20s of the kill: %w", err)
	}
	t.open, t.local = seen[0], seen[1]
	res.OpenAfterMs, res.LocalAfterMs = ms(t.open.Sub(t.kill)), ms(t.local.Sub(t.kill))
	h.logf("breaker open %.0fms after the kill (first local decision seen after %.0fms; polled every %.0fms)", res.OpenAfterMs, res.LocalAfterMs, res.PollMs)
	return nil
}

// waitClosed waits for the breaker to close after the restart. Not seeing
// it closed within 20s is reported, not fatal: a machine too busy for the
// 5ms deadline keeps reopening it.
func (h *harness) waitClosed(ctx context.Context, gw *gatewayProc, res *OutageResult, t *outageMarks) error {
	seen, err := waitMetrics(ctx, gw, 20*time.Millisecond, 20*time.Second,
		func(m promSamples) bool { return m.sum("tollgate_gateway_breaker_state", `state="closed"`) == 1 })
	switch {
	case err == nil:
		t.closed = seen[0]
		res.ClosedAfterMs = ms(t.closed.Sub(t.restart))
		h.logf("breaker closed %.0fms after the restart", res.ClosedAfterMs)
	case errors.Is(err, errNotSeen):
		t.closed, res.ClosedAfterMs = time.Now(), -1
		res.Note = "the breaker was not seen closed within 20s of the restart (polled every 20ms)"
		h.logf("%s", res.Note)
	default:
		return err
	}
	return nil
}

// errNotSeen: waitMetrics's conditions did not all hold in time.
var errNotSeen = errors.New("not seen")

// waitMetrics scrapes the gateway every poll until each condition has held
// once, and returns when each was first seen; errNotSeen after within.
func waitMetrics(ctx context.Context, gw *gatewayProc, poll, within time.Duration, conds ...func(promSamples) bool) ([]time.Time, error) {
	seen := make([]time.Time, len(conds))
	start := time.Now()
	for {
		m, err := gw.metrics(ctx)
		if err != nil {
			return nil, err
		}
		now, done := time.Now(), true
		for i, c := range conds {
			if seen[i].IsZero() && c(m) {
				seen[i] = now
			}
			done = done && !seen[i].IsZero()
		}
		if done {
			return seen, nil
		}
		if now.Sub(start) > within {
			return nil, errNotSeen
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
}

// outageSummary cuts the run into its windows (a table: name, from, to)
// and counts what was slow in each.
func (h *harness) outageSummary(res *OutageResult, all *loadResult, t outageMarks) {
	warm := min(h.plan.OutagePhase/5, time.Second)
	for _, w := range []struct {
		dst      **loadResult
		name     string
		from, to time.Time
	}{
		{&res.Before, "before", t.begin.Add(warm), t.kill},
		{&res.Transition, "kill → open", t.kill, t.open},
		{&res.During, "open (fallback)", t.open, t.restart},
		{&res.Recovery, "restart → closed", t.restart, t.closed},
		{&res.After, "after", t.closed, t.end},
	} {
		*w.dst = all.window(w.name, w.from, w.to)
	}
	direct := res.DirectP99
	res.AddedP99Before = round(res.Before.P99-direct, 3)
	res.AddedP99During = round(res.During.P99-direct, 3)
	res.AddedP99After = round(res.After.P99-direct, 3)
	for _, s := range all.samples {
		slow := s.latency >= outageTimeout
		switch {
		case slow && s.at.After(t.open) && s.at.Before(t.restart):
			res.SlowDuring++
		case slow && s.at.After(t.begin.Add(warm)) && s.at.Before(t.kill):
			res.SlowBefore++
		}
	}
	res.Series = outageSeries(all, t.begin, t.end, t.kill, t.open, t.restart, t.closed)
	h.logf("p99 before %.3f, during %.3f, after %.3f ms (direct %.3f); %d requests ≥ %.0fms while open (%d before); admitted %d vs limit %.0f (%.3f)",
		res.Before.P99, res.During.P99, res.After.P99, direct, res.SlowDuring, res.SlowThresholdMs, res.SlowBefore, res.AdmittedDuring, res.LimitDuring, res.AdmittedRatio)
}

// outageSeries bins the outage run: p99 latency (ms) and requests answered
// 200 per bin.
func outageSeries(r *loadResult, begin, end, kill, open, restart, closed time.Time) *series {
	bin := 100 * time.Millisecond
	nb := int(end.Sub(begin)/bin) + 1
	lat := make([][]time.Duration, nb)
	s := &series{Bin: bin, Admitted: make([]int64, nb), P99: make([]float64, nb)}
	for _, x := range r.samples {
		i := int(x.at.Sub(begin) / bin)
		if i < 0 || i >= nb {
			continue
		}
		lat[i] = append(lat[i], x.latency)
		if x.code == http.StatusOK {
			s.Admitted[i]++
		}
	}
	for i := range lat {
		sortDurations(lat[i])
		s.P99[i] = ms(quantile(lat[i], .99))
	}
	s.Events = []event{
		{kill.Sub(begin), "kill"}, {open.Sub(begin), "open"}, {restart.Sub(begin), "restart"}, {closed.Sub(begin), "closed"},
	}
	return s
}
