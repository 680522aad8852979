package main

import (
	"fmt"
	"math"
	"strings"
)

// The targets the harness checks are the ones below: this table is where
// they are written down (BENCHMARKS.md shows the last full run against
// them). Each reads its figure from the results; a target whose scenario did
// not run is reported as "not run", unless it is optional.

// target is one checked figure: what it is, its threshold as the report
// shows it, and how to read it from the results.
type target struct {
	what      string
	threshold string
	// extract returns what the run measured, one row per mode or rate
	// where the target has several; none when its scenario did not run.
	extract func(h *harness) []measured
	// optional targets get no "not run" row.
	optional bool
}

// measured is what a run measured for a target.
type measured struct {
	what   string // replaces the target's what, when set
	value  string
	met    bool
	judged bool // false: shown, but this run cannot judge it (n/a)
	note   string
}

var targets = []target{
	{what: "added latency p99 at 2,500 req/s", threshold: "≤ 1 ms over direct", extract: addedLatency},
	{what: "gateway CPU per proxied request", threshold: "≤ 2× nginx's", extract: cpuVsNginx, optional: true},
	{what: "Redis round trips per decision, hot tenant, prefetch", threshold: "≤ 0.05", extract: prefetchRoundTrips},
	{what: "Redis round trips per decision", threshold: "≤ 1", extract: roundTrips, optional: true},
	{what: "admitted vs ideal, 20 instances, Redis healthy", threshold: "within ±2 %", extract: accuracy("healthy", "")},
	{what: "admitted vs ideal, 20 instances, prefetch Auto", threshold: "within ±5 % (the rule's error budget)", optional: true,
		extract: accuracy("prefetch", "prefetch trades exactness for round trips")},
	{what: "admitted vs ideal, 20 instances, Redis slow (calls missing the deadline)", threshold: "within ±5 %", extract: accuracy("slow", ""), optional: true},
	{what: "admitted vs ideal, 20 instances, Redis outage", threshold: "within ±10 %", extract: accuracy("outage", ""), optional: true},
	{what: "rule change to enforcement on every replica", threshold: "p99 ≤ 1 s", extract: propagation},
	{what: "breaker open after Redis dies", threshold: "≤ 100 ms", extract: breakerOpen},
	{what: "no request pays the timeout once open", threshold: "0 requests wait for Redis", extract: slowWhileOpen, optional: true},
	{what: "gateway CPU per limiter decision", threshold: "≤ 30 µs", extract: limiterCPU},
	{what: "Redis memory per bucket, expiry index included", threshold: "≤ 100 bytes", extract: redisMemory, optional: true},
	{what: "data-plane memory", threshold: "≤ 50 MB", extract: gatewayMemory, optional: true},
	{what: "controller sync", threshold: "≤ 5 s", extract: publishTime, optional: true},
	{what: "Envoy rate limit service decisions per CPU-second", threshold: "≥ 2× Envoy's ratelimit service", extract: rlsVsReference, optional: true},
	{what: "rate limit service CPU per decision", threshold: "≤ 1.4× a bare grpc-go server's per call", extract: rlsVsFloor, optional: true},
	{what: "Redis Cluster scaling, decisions per Redis CPU-second at 6 masters ÷ at 3, each master at the same load", threshold: "≥ 0.9", extract: scalingEfficiency, optional: true},
	{what: "max/mean master load", threshold: "≤ 1.3", extract: masterBalance, optional: true},
	{what: "region demand recording: round trips per decision", threshold: "no more than without", extract: demandRoundTrips, optional: true},
	{what: "region demand recording: gateway CPU per decision", threshold: "< 1.05× without", extract: demandCPU, optional: true},
}

// demandRoundTrips: recording region demand adds no round trip (the
// script call that decides records it).
func demandRoundTrips(h *harness) []measured {
	r := h.res.Regions
	if r == nil || len(r.Overhead) < 2 {
		return nil
	}
	on, off := r.Overhead[0], r.Overhead[1]
	return []measured{{value: fmt.Sprintf("%.4f vs %.4f", on.RoundTripsPerDec, off.RoundTripsPerDec),
		met: on.RoundTripsPerDec <= off.RoundTripsPerDec+0.001, judged: true}}
}

// demandCPU: what recording region demand costs the gateway per decision,
// against a gateway that does not record, in the same run.
func demandCPU(h *harness) []measured {
	r := h.res.Regions
	if r == nil || r.CPURatio == 0 {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%.3f× (redis-server %.3f×)", r.CPURatio, r.RedisCPURatio),
		met: r.CPURatio < 1.05, judged: h.judging(), note: quickNote(h)}}
}

// judging reports whether the run's speed figures can be judged: a full
// run, not built with the race detector.
func (h *harness) judging() bool { return !h.cfg.quick && !h.res.Meta.Race }

// checkTargets compares the results with the targets.
func (h *harness) checkTargets() []TargetCheck {
	var out []TargetCheck
	for _, t := range targets {
		ms := t.extract(h)
		if len(ms) == 0 && !t.optional {
			out = append(out, TargetCheck{What: t.what, Target: t.threshold, Measured: "not run", Status: "n/a"})
		}
		for _, m := range ms {
			c := TargetCheck{What: t.what, Target: t.threshold, Measured: m.value, Status: "n/a", Note: m.note}
			if m.what != "" {
				c.What = m.what
			}
			if m.judged {
				c.Status = "missed"
				if m.met {
					c.Status = "met"
				}
			}
			out = append(out, c)
		}
	}
	return out
}

func addedLatency(h *harness) []measured {
	if h.res.Latency == nil {
		return nil
	}
	var out []measured
	for _, s := range h.res.Latency.Steps {
		if s.Rate == 2500 {
			out = append(out, measured{value: fmt.Sprintf("%+.3f ms (p99 %.3f vs %.3f ms direct)", s.AddedP99, s.Gateway.P99, s.Direct.P99),
				met: s.AddedP99 <= 1, judged: true})
		}
	}
	return out
}

// cpuVsNginx compares CPU per proxied request with nginx proxying the same
// traffic, at every rate both ran.
func cpuVsNginx(h *harness) []measured {
	if h.res.Latency == nil {
		return nil
	}
	var out []measured
	gateway := h.res.Latency.Pinned // placed on CPUs as nginx was
	if len(gateway) == 0 {
		gateway = h.res.Latency.Steps
	}
	for _, n := range h.res.Latency.Nginx {
		for _, s := range gateway {
			if s.Rate != n.Rate || n.CPUPerRequest <= 0 {
				continue
			}
			ratio := s.CPUPerRequest / n.CPUPerRequest
			out = append(out, measured{what: fmt.Sprintf("gateway CPU per proxied request at %d req/s", s.Rate),
				value: fmt.Sprintf("%.1f µs vs nginx %.1f µs: %.2f×", s.CPUPerRequest, n.CPUPerRequest, ratio), met: ratio <= 2, judged: true,
				note: "the gateway also decides (Redis call included); nginx only proxies" + floorNote(h, s.Rate)})
		}
	}
	return out
}

// floorNote gives the floors' CPU per request at rate, if measured: the
// share of the HTTP engine in the gateway's figure, on net/http and on
// fasthttp.
func floorNote(h *harness, rate int) string {
	var note string
	for _, f := range h.res.Latency.ProxyFloor {
		if f.Rate == rate && f.CPUPerRequest > 0 {
			note += fmt.Sprintf("; a bare httputil.ReverseProxy: %.1f µs", f.CPUPerRequest)
		}
	}
	for _, f := range h.res.Latency.FastFloor {
		if f.Rate == rate && f.CPUPerRequest > 0 {
			note += fmt.Sprintf("; a bare fasthttp proxy: %.1f µs", f.CPUPerRequest)
		}
	}
	return note
}

// redisCostModes returns the Redis cost modes measured on both traffics.
func redisCostModes(h *harness) []RedisCostMode {
	if h.res.RedisCost == nil {
		return nil
	}
	var out []RedisCostMode
	for _, m := range h.res.RedisCost.Modes {
		if m.Hot != nil && m.Mix != nil {
			out = append(out, m)
		}
	}
	return out
}

func prefetchRoundTrips(h *harness) []measured {
	var out []measured
	for _, m := range redisCostModes(h) {
		if m.Mode == "prefetch" {
			out = append(out, measured{value: fmt.Sprintf("%.4f (mix: %.4f)", m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec),
				met: m.Hot.RoundTripsPerDec <= 0.05, judged: true})
		}
	}
	return out
}

func roundTrips(h *harness) []measured {
	var out []measured
	for _, m := range redisCostModes(h) {
		if m.Mode != "prefetch" {
			worst := math.Max(m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec)
			out = append(out, measured{what: "Redis round trips per decision, " + m.Mode,
				value: fmt.Sprintf("%.4f hot tenant, %.4f mix", m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec), met: worst <= 1, judged: true})
		}
	}
	return out
}

// accuracy reads the accuracy case name at 20 instances.
func accuracy(name, note string) func(h *harness) []measured {
	return func(h *harness) []measured {
		if h.res.Accuracy == nil {
			return nil
		}
		var out []measured
		for _, c := range h.res.Accuracy.Cases {
			if c.Instances == 20 && c.Case == name {
				out = append(out, measured{value: fmt.Sprintf("%+.2f %%", 100*c.Error), met: c.Within, judged: true, note: note})
			}
		}
		return out
	}
}

func propagation(h *harness) []measured {
	p := h.res.Propagation
	if p == nil || p.Changes == 0 {
		return nil
	}
	return []measured{{value: fmt.Sprintf("p99 %.0f ms, p50 %.0f ms (%d changes, 3 gateways)", p.P99, p.P50, p.Changes), met: p.P99 <= 1000, judged: true}}
}

func breakerOpen(h *harness) []measured {
	o := h.res.Outage
	if o == nil || o.During == nil {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%.0f ms (polled every %.0f ms)", o.OpenAfterMs, o.PollMs), met: o.OpenAfterMs <= 100, judged: true}}
}

func slowWhileOpen(h *harness) []measured {
	o := h.res.Outage
	if o == nil || o.During == nil {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%.0f requests waited for Redis while open", o.WaitedOpen),
		met: o.WaitedOpen == 0, judged: true,
		note: fmt.Sprintf("the gateway's count (tollgate_gateway_redis_waits_total); at the client, %d of %d requests took ≥ 5 ms while open and %d of %d before the kill (a client-side latency counts the machine's scheduling too)", o.SlowDuring, o.During.Sent, o.SlowBefore, o.Before.Sent)}}
}

func limiterCPU(h *harness) []measured {
	if h.res.Throughput == nil {
		return nil
	}
	var out []measured
	for _, m := range h.res.Throughput.Modes {
		if m.Mode == "batched" && m.Profile != nil {
			p := m.Profile
			out = append(out, measured{what: "gateway CPU per limiter decision (Redis client included), default mode",
				value: fmt.Sprintf("%.1f µs (%.0f %% of %.1f µs per proxied request, from the CPU profile)", p.LimiterPerDec, 100*p.LimiterShare, p.CPUPerRequest),
				met:   p.LimiterPerDec <= 30, judged: true, note: "the whole gateway process, proxying included, is the second figure"})
		}
	}
	return out
}

// joinNotes joins the notes that are not empty.
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// quickNote explains why a quick run does not judge the scale targets.
func quickNote(h *harness) string {
	if h.cfg.quick {
		return "quick run: smaller sizes, not a measurement of the target"
	}
	return ""
}

func redisMemory(h *harness) []measured {
	s := h.res.Scale
	if s == nil || s.RedisBytesPerBkt <= 0 {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%.1f bytes (used_memory delta over %d buckets, 5 per tenant); MEMORY USAGE of one tenant's key %d", s.RedisBytesPerBkt, s.Buckets, s.MemoryUsageSample),
		met: s.RedisBytesPerBkt <= 100, judged: true}}
}

func gatewayMemory(h *harness) []measured {
	s := h.res.Scale
	if s == nil || s.RSS <= 0 {
		return nil
	}
	return []measured{{what: fmt.Sprintf("data-plane memory with %d rules", s.Rules),
		value: fmt.Sprintf("%+.1f MiB RSS over an idle gateway (%.1f vs %.1f MiB)", float64(s.RSSDelta)/(1<<20), float64(s.RSS)/(1<<20), float64(s.RSSIdle)/(1<<20)),
		met:   s.RSSDelta <= 50<<20, judged: !h.cfg.quick, note: quickNote(h)}}
}

func publishTime(h *harness) []measured {
	s := h.res.Scale
	if s == nil || s.PublishSeconds <= 0 {
		return nil
	}
	return []measured{{what: "controller sync of " + s.PublishBench, value: fmt.Sprintf("%.2f s", s.PublishSeconds),
		met: s.PublishSeconds <= 5, judged: h.judging(), note: quickNote(h)}}
}

func rlsVsFloor(h *harness) []measured {
	r := h.res.RLS
	if r == nil || r.Floor == nil {
		return nil
	}
	note := "batched (default) mode; floor measured in the same run"
	for _, m := range r.Modes {
		if m.Mode == "local" && m.VsFloor > 0 {
			note += fmt.Sprintf("; without Redis (--limiter=local) %.1f µs: %.2f×", m.CPUPerDecision, m.VsFloor)
		}
	}
	// The design measures speed at a constant rate: the closed loop is
	// shown, and judged only where no steady pass ran.
	if len(r.Steady) > 0 {
		note += fmt.Sprintf("; not judged: a closed loop gives each target as many calls as it answers (here the floor %s), and CPU per call falls as calls per second grow; the steady passes below compare the same work", callsVsBatched(r.RLSPass))
	}
	out := batchedVsFloor(h, r.RLSPass, len(r.Steady) == 0, note)
	for _, p := range r.Steady {
		out = append(out, batchedVsFloor(h, p, true, "batched (default) mode, every target at the same rate")...)
	}
	return out
}

// callsVsBatched says how many calls per second the floor answered in pass
// p against the batched mode.
func callsVsBatched(p RLSPass) string {
	if m := p.batched(); m != nil && m.PerSecond > 0 && p.Floor != nil {
		return fmt.Sprintf("answered %.2f× the batched mode's calls per second", p.Floor.PerSecond/m.PerSecond)
	}
	return "ran alone"
}

// batchedVsFloor compares the batched mode of one pass of the rls scenario
// with its floor, judged when judge is set (and the run can judge).
func batchedVsFloor(h *harness, p RLSPass, judge bool, note string) []measured {
	m := p.batched()
	if m == nil || m.VsFloor <= 0 || p.Floor == nil {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%s: %.1f µs vs %.1f µs: %.2f×", p.name(), m.CPUPerDecision, p.Floor.CPUPerDecision, m.VsFloor),
		met: m.VsFloor <= 1.4, judged: judge && h.judging(), note: note}}
}

func rlsVsReference(h *harness) []measured {
	if h.res.RLS == nil {
		return nil
	}
	out := batchedVsReference(h, h.res.RLS.RLSPass)
	for _, p := range h.res.RLS.Steady {
		out = append(out, batchedVsReference(h, p)...)
	}
	return out
}

// batchedVsReference judges the batched mode of one pass of the rls
// scenario against Envoy's ratelimit service's figure (~8,000 decisions/s).
func batchedVsReference(h *harness, p RLSPass) []measured {
	m := p.batched()
	if m == nil || m.PerCPUSecond <= 0 {
		return nil
	}
	return []measured{{value: fmt.Sprintf("%s: %.0f vs %.0f: %.2f×", p.name(), m.PerCPUSecond, 1e6/refRLSCPUMicrosPerDec, m.VsReference),
		met: m.VsReference >= 2, judged: h.judging(), note: "batched (default) mode; the reference ran on another machine"}}
}

// scaleOutPass is the scale-out scenario's pass of masters with shards,
// nil when it did not run.
func scaleOutPass(h *harness, masters int) *SOPass {
	if h.res.ScaleOut == nil {
		return nil
	}
	for i := range h.res.ScaleOut.Passes {
		if p := &h.res.ScaleOut.Passes[i]; p.Masters == masters && p.Shards {
			return p
		}
	}
	return nil
}

// scalingEfficiency is decisions per Redis CPU-second at 6 masters over 3,
// pooled over the rounds. Judged with each master at the same load (6 at
// the rate, 3 at the share of it that loads each of 3 masters alike): what
// sizing by a master's CPU needs. Shown beside it: both at the same total
// rate, where each of 6 masters is half as busy.
func scalingEfficiency(h *harness) []measured {
	if h.res.ScaleOut == nil {
		return nil
	}
	s, ok := soScalingOf(h.plan, h.res.ScaleOut.Passes)
	if !ok {
		return nil
	}
	rounds := fmt.Sprintf("%d round(s) pooled", s.rounds)
	return []measured{
		{what: fmt.Sprintf("Redis Cluster scaling, decisions per Redis CPU-second at %d masters ÷ at %d, each master at the same load", s.large, s.small),
			value: fmt.Sprintf("%.2f (%.0f at %d/s vs %.0f at %d/s)", s.big/s.same, s.big, s.rate, s.same, s.sameRate),
			met:   s.big/s.same >= 0.9, judged: h.judging(), note: joinNotes(rounds, quickNote(h))},
		{what: fmt.Sprintf("the same, both at %d/s (each of %d masters with %d/%d of the load of each of %d)", s.rate, s.large, s.small, s.large, s.small),
			value: fmt.Sprintf("%.2f (%.0f vs %.0f)", s.big/s.whole, s.big, s.whole),
			note:  joinNotes(rounds, "shown, not judged: a less busy redis-server spends more CPU per call (the 3-master passes at the two rates show how much)")},
	}
}

// masterBalance is the busiest master's CPU over the mean, with shards.
func masterBalance(h *harness) []measured {
	var out []measured
	for _, m := range h.plan.ScaleOutMasters {
		if p := scaleOutPass(h, m); p != nil {
			out = append(out, measured{what: fmt.Sprintf("max/mean master CPU, %d masters, hot tenants sharded", m),
				value: fmt.Sprintf("%.2f (script calls %.2f)", p.MaxMeanCPU, p.MaxMeanCalls), met: p.MaxMeanCPU <= 1.3, judged: h.judging(), note: quickNote(h)})
		}
	}
	return out
}
