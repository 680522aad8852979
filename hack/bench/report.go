package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// writeReport writes results.json, the plots and report.md.
func (h *harness) writeReport() error {
	h.res.Targets = h.checkTargets()
	plots, err := h.writePlots()
	if err != nil {
		h.res.Errors["plots"] = err.Error()
	}
	h.plots = plots
	data, err := json.MarshalIndent(h.res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(h.path("results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(h.path("report.md"), []byte(h.markdown()), 0o644)
}

// md builds Markdown.
type md struct{ strings.Builder }

func (m *md) p(format string, args ...any) { fmt.Fprintf(m, format+"\n", args...) }

// para writes a paragraph: a line and a blank one.
func (m *md) para(format string, args ...any) {
	m.p(format, args...)
	m.p("")
}

// section starts a section: its title and its intro paragraph.
func (m *md) section(title, intro string, args ...any) {
	m.para("## %s", title)
	m.para(intro, args...)
}

func (m *md) table(head []string, rows [][]string) {
	m.p("| %s |", strings.Join(head, " | "))
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "---"
	}
	m.p("| %s |", strings.Join(seps, " | "))
	for _, r := range rows {
		m.p("| %s |", strings.Join(r, " | "))
	}
	m.p("")
}

func (h *harness) plot(m *md, name, alt string) {
	for _, p := range h.plots {
		if p == name {
			m.para("![%s](%s)", alt, name)
		}
	}
}

// details writes lines as a code block folded under summary.
func (m *md) details(summary string, lines []string) {
	m.para("<details><summary>%s</summary>", summary)
	m.p("```")
	for _, l := range lines {
		m.p("%s", l)
	}
	m.p("```")
	m.para("</details>")
}

func f3(x float64) string { return fmt.Sprintf("%.3f", x) }
func f1(x float64) string { return fmt.Sprintf("%.1f", x) }
func xr(x float64) string { return fmt.Sprintf("%.2f×", x) }

// xrBase formats a ratio to a baseline that may be missing (a ceiling of 0:
// the baseline failed its first step).
func xrBase(x, base float64) string {
	if base == 0 {
		return "n/a (baseline failed its first step)"
	}
	return xr(x)
}

// floorRatio is a run's CPU per decision over the floor's ("floor" for the
// floor itself, which has no ratio to itself).
func floorRatio(x RLSRun) string {
	if x.Mode == "floor" {
		return "floor"
	}
	return xr(x.VsFloor)
}

// latencyRow is one row of the latency table.
func latencyRow(label string, s LatencyStep) []string {
	return []string{label,
		f3(s.Direct.P50), f3(s.Gateway.P50), fmt.Sprintf("%+.3f", s.AddedP50),
		f3(s.Direct.P99), f3(s.Gateway.P99), fmt.Sprintf("%+.3f", s.AddedP99),
		f3(s.Direct.P999), f3(s.Gateway.P999), fmt.Sprintf("%+.3f", s.AddedP999),
		xr(ratio(s.Gateway.P99, s.Direct.P99)), f1(s.CPUPerRequest), fmt.Sprintf("%.2f%%", 100*s.Gateway.BadFrac)}
}

func (h *harness) markdown() string {
	r := h.res
	var m md
	m.para("# tollgate benchmark report (%s run)", r.Meta.Mode)
	m.p("- date: %s", r.Meta.Date)
	m.p("- machine: %d cores, %s, %.1f GiB, Linux %s, %s, redis-server %s", r.Meta.Cores, r.Meta.CPUModel, float64(r.Meta.MemoryBytes)/(1<<30), r.Meta.Kernel, r.Meta.GoVersion, r.Meta.RedisVersion)
	m.p("- command: `%s` (%.0f s)", r.Meta.Command, r.Meta.Seconds)
	m.p("- load average (1 min) at the start and end of each scenario: %s; above ~2 something else was using the machine", loadSummary(r.Meta.LoadAvg))
	m.p("- everything on loopback on this one machine: the load generator (vegeta, open loop, constant rate) and the echo upstream share the two cores with redis-server and the gateway process, so absolute figures are the machine's; each is shown next to a baseline of the same run.")
	m.p("- CPUs in the latency scenario's CPU comparison, the rls and the http2 scenarios (gateway, floors, nginx): %s", r.Meta.Pinning)
	if r.Meta.Mode == "quick" {
		m.p("- **quick run**: the scenarios run briefly (every one with -all), to check the harness works. Not a measurement.")
	}
	if r.Meta.Race {
		m.p("- **built with -race**: the harness's own figures (and the publish benchmark) are not speed figures.")
	}
	m.p("")
	if len(r.Errors) > 0 {
		m.para("## Errors")
		var keys []string
		for k := range r.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.p("- **%s**: %s", k, strings.ReplaceAll(firstLines(r.Errors[k], 6), "\n", " / "))
		}
		m.p("")
	}
	m.section("Targets", "The targets are written in hack/bench/targets.go (the table `targets`); BENCHMARKS.md shows the last full run against them.")
	var rows [][]string
	for _, t := range r.Targets {
		status := t.Status
		switch status {
		case "met":
			status = "**met**"
		case "missed":
			status = "**MISSED**"
		}
		rows = append(rows, []string{t.What, t.Target, t.Measured, status, t.Note})
	}
	m.table([]string{"what", "target", "measured", "status", "note"}, rows)
	m.para("Reference figures for context (from the issue, other machines): one redis-server does ~60–70k EVALSHA/s unpipelined and 80–125k/s with 16-deep pipelining; Envoy's Go ratelimit service ~8,000 decisions/s at p99 ~14 ms and ~117 µs CPU per decision; nginx as a reverse proxy adds ~100–150 µs at p50.")

	h.mdLatency(&m)
	h.mdThroughput(&m)
	h.mdRedisCost(&m)
	h.mdAccuracy(&m)
	h.mdOutage(&m)
	h.mdPropagation(&m)
	h.mdScale(&m)
	h.mdRLS(&m)
	h.mdLimits(&m)
	h.mdScaleOut(&m)
	h.mdHTTP2(&m)
	h.mdRegions(&m)
	return m.String()
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

func (h *harness) mdLatency(m *md) {
	l := h.res.Latency
	if l == nil {
		return
	}
	m.section("1. Added latency (baseline: direct to the upstream)", "One gateway process (default flags: batched Redis), rule %s; tenants: %s. Each rate runs %s direct, then %s through the gateway.", l.Rule, l.Mix, h.plan.LatencyDur, h.plan.LatencyDur)
	var rows [][]string
	for _, s := range l.Steps {
		rows = append(rows, latencyRow(fmt.Sprint(s.Rate), s))
	}
	refs := map[string][]LatencyStep{"gateway, pinned": l.Pinned, "nginx": l.Nginx, "net/http floor": l.ProxyFloor, "fasthttp floor": l.FastFloor}
	for _, name := range []string{"gateway, pinned", "nginx", "net/http floor", "fasthttp floor"} {
		for _, s := range refs[name] {
			rows = append(rows, latencyRow(fmt.Sprintf("%d (%s)", s.Rate, name), s))
		}
	}
	m.table([]string{"req/s", "p50 direct", "p50 gw", "added", "p99 direct", "p99 gw", "added", "p99.9 direct", "p99.9 gw", "added", "p99 gw/direct", "gw CPU µs/req", "errors"}, rows)
	m.p("Latencies in ms. CPU: the gateway process's utime+stime (/proc) per proxied request. The rates run unpinned (the load generator, the upstream and Redis could not keep up on one CPU). Then, at the first rate, each measured process alone on one CPU (CPUs: %s): the gateway again (the CPU compared with nginx in the targets), and the references: nginx, the net/http floor (a bare `httputil.ReverseProxy` with the gateway's transport settings and pooled copy buffers: Go's HTTP engine alone, without the limiter) and the fasthttp floor (a bare `valyala/fasthttp` server + `HostClient` proxy with the same settings where they map, `hack/engineeval`).", h.res.Meta.Pinning)
	if l.Note != "" {
		m.p("")
		m.p("%s", l.Note)
	}
	m.p("")
	h.plot(m, "latency.png", "latency percentiles, direct vs gateway")
}

func (h *harness) mdThroughput(m *md) {
	t := h.res.Throughput
	if t == nil {
		return
	}
	m.section("2. Throughput ceiling per gateway instance (baseline: classic, one EVALSHA per request)", "The offered rate steps up (%s per step) until p99 > %s, more than %.0f%% errors (neither 2xx nor 429), or the load generator cannot send the rate. Tenants: %s; rule %s.",
		h.plan.CeilingDur, h.plan.CeilingP99, 100*h.plan.CeilingBadMax, t.Mix, generousRule(false))
	var rows [][]string
	for _, md := range t.Modes {
		base := t.Modes[0]
		rows = append(rows, []string{md.Mode, md.Flags, fmt.Sprint(md.Ceiling), xrBase(md.CeilingVs, float64(base.Ceiling)), f1(md.CeilingCPU), xrBase(md.CPUVs, base.CeilingCPU), md.StoppedBy})
	}
	m.table([]string{"mode", "how", "ceiling req/s", "vs classic", "CPU µs/decision at ceiling", "vs classic", "next step failed by"}, rows)
	rows = nil
	for _, md := range t.Modes {
		for _, s := range md.Steps {
			v := "pass"
			if !s.Pass {
				v = s.Why
			}
			rows = append(rows, []string{md.Mode, fmt.Sprint(s.Load.Rate), fmt.Sprintf("%.0f", s.Load.SentRate), f3(s.Load.P50), f3(s.Load.P99), f3(s.Load.P999), fmt.Sprintf("%.2f%%", 100*s.Load.BadFrac), f1(s.CPUPerDecision), v})
		}
	}
	m.para("<details><summary>every step</summary>")
	m.table([]string{"mode", "offered", "sent/s", "p50", "p99", "p99.9", "errors", "CPU µs/decision", ""}, rows)
	m.para("</details>")
	h.plot(m, "throughput.png", "p99 vs offered rate per limiter mode")
	m.para("**CPU profile** of each mode at %d req/s (`--pprof`, `go tool pprof -top`; files `profile-<mode>.pb.gz`). The limiter's share is the cumulative CPU of `decision.(*Engine).DecideRule` (rule lookup, cache, breaker, local buckets, and in classic mode the Redis call) plus `limiter.(*worker).run` (the Batcher's pipelines: writing, the socket, reading); GC caused by their allocations is not attributed, so it is a lower bound.", h.plan.ProfileRate)
	rows = nil
	for _, md := range t.Modes {
		if p := md.Profile; p != nil {
			rows = append(rows, []string{md.Mode, f1(p.CPUPerRequest), fmt.Sprintf("%.0f%%", 100*p.LimiterShare), f1(p.LimiterPerDec), strings.Join(p.LimiterMatches, ", ")})
		}
	}
	m.table([]string{"mode", "gateway CPU µs/request", "limiter share", "limiter CPU µs/decision", "roots"}, rows)
	for _, md := range t.Modes {
		if p := md.Profile; p != nil && len(p.Top) > 0 {
			m.details(md.Mode+": heaviest functions (flat)", p.Top)
		}
	}
}

func (h *harness) mdRedisCost(m *md) {
	c := h.res.RedisCost
	if c == nil {
		return
	}
	m.section("3. Redis cost per decision (baseline: classic)", "%d req/s for %s on the mix (%s), then the hot tenant alone at its share of that rate. Rule: %s. Round trips and script calls sent come from the gateway's `/metrics` (`tollgate_gateway_redis_roundtrips_total`, `_commands_total`) over `tollgate_gateway_decisions_total`; Redis's own count is `INFO commandstats` (evalsha + eval) after `CONFIG RESETSTAT`. The local mode makes no Redis calls.",
		h.plan.CostRate, h.plan.CostDur, c.Mix, c.Rule)
	var rows [][]string
	var base *RedisCostMode
	for i := range c.Modes {
		md := &c.Modes[i]
		if base == nil {
			base = md
		}
		for _, x := range []struct {
			what string
			r, b *RedisCostRun
		}{{"mix", md.Mix, base.Mix}, {"hot tenant only", md.Hot, base.Hot}} {
			if x.r == nil {
				continue
			}
			rows = append(rows, []string{md.Mode, x.what, fmt.Sprint(x.r.Rate), fmt.Sprintf("%.0f", x.r.Decisions),
				fmt.Sprintf("%.4f", x.r.RoundTripsPerDec), xr(ratio(x.r.RoundTripsPerDec, x.b.RoundTripsPerDec)),
				fmt.Sprintf("%.4f", x.r.CommandsPerDec), fmt.Sprintf("%.4f", x.r.ServerCallsPerDec), xr(ratio(x.r.ServerCallsPerDec, x.b.ServerCallsPerDec)),
				f1(x.r.CPUPerDecision), f1(x.r.RedisCPUPerDecision), f3(x.r.P99)})
		}
	}
	m.table([]string{"mode", "traffic", "req/s", "decisions", "round trips/decision", "vs classic", "script calls sent/decision", "Redis script calls/decision", "vs classic", "gateway CPU µs/decision", "redis-server CPU µs/decision", "p99 ms"}, rows)
}

func (h *harness) mdAccuracy(m *md) {
	a := h.res.Accuracy
	if a == nil {
		return
	}
	m.section("4. Accuracy: admitted vs ideal (baseline: the ideal token bucket)", "Rule %s; load: %s. %s.", a.Rule, a.Load, a.Note)
	var rows [][]string
	for _, c := range a.Cases {
		batch := ""
		if c.Batch > 0 {
			batch = fmt.Sprint(c.Batch)
		}
		rows = append(rows, []string{c.Case, fmt.Sprint(c.Instances), batch, f3(c.Seconds), fmt.Sprint(c.Decisions), fmt.Sprint(c.Admitted),
			fmt.Sprintf("%.0f – %.0f", c.IdealLow, c.IdealHigh), fmt.Sprintf("%.4f", c.Ratio), fmt.Sprintf("%+.2f%%", 100*c.Error), fmt.Sprintf("±%.0f%%", 100*c.Target), okMark(c.Within)})
	}
	m.table([]string{"case", "instances", "prefetch batch", "window s", "decisions", "admitted", "ideal", "admitted/ideal", "error", "target", ""}, rows)
	m.para("The error is 0 inside the ideal range (the window bracketed by Redis TIME before and after stopping the load), else the distance to its nearer end.")
	h.plot(m, "accuracy-healthy-20.png", "admitted vs ideal, 20 instances, Redis healthy")
	h.plot(m, "accuracy-outage-20.png", "admitted vs ideal, 20 instances, Redis outage")
}

func (h *harness) mdOutage(m *md) {
	o := h.res.Outage
	if o == nil || o.Before == nil {
		return
	}
	m.section("5. Redis outage under load (baseline: direct to the upstream, and the gateway before the kill)", "%d req/s through one gateway (%s); rule %s. redis-server is killed with SIGKILL, then restarted empty on the same port after %s.", o.Rate, o.Flags, o.Rule, h.plan.OutagePhase)
	m.p("- breaker open **%.0f ms** after the kill (`tollgate_gateway_breaker_state{state=\"open\"}` polled every %.0f ms); first local decision seen after %.0f ms", o.OpenAfterMs, o.PollMs, o.LocalAfterMs)
	if o.ClosedAfterMs >= 0 {
		m.p("- breaker closed %.0f ms after the restart", o.ClosedAfterMs)
	} else {
		m.p("- %s", o.Note)
	}
	m.p("- requests ≥ %.0f ms (the Redis deadline) while open: **%d** of %d; before the kill: %d of %d", o.SlowThresholdMs, o.SlowDuring, o.During.Sent, o.SlowBefore, o.Before.Sent)
	m.p("- requests that waited for Redis while open (the gateway's `tollgate_gateway_redis_waits_total`, from %s after the breaker was seen open to the restart): **%.0f**", openSettle, o.WaitedOpen)
	m.p("- Redis calls while open: %.0f (the breaker's background probes; no request waits for them)", o.RedisCallsOpen)
	m.para("- admitted by the local fallback from the kill to the restart (`tollgate_gateway_decisions_total{result=\"allowed\",source=\"local\"}`): %d vs the rule's limit over that window (%d tenants × (capacity + rate × window)) %.0f: **%.3f**", o.AdmittedDuring, outageTenants, o.LimitDuring, o.AdmittedRatio)
	var rows [][]string
	for _, w := range []*loadResult{o.Before, o.Transition, o.During, o.Recovery, o.After} {
		rows = append(rows, []string{w.Name, f3(w.Seconds), fmt.Sprint(w.Sent), f3(w.P50), f3(w.P99), fmt.Sprintf("%+.3f", w.P99-o.DirectP99), f3(w.Max), fmt.Sprint(w.Codes)})
	}
	m.table([]string{"phase", "seconds", "requests", "p50", "p99", "p99 added vs direct", "max", "codes"}, rows)
	m.para("Direct p99 at the same rate: %.3f ms.", o.DirectP99)
	h.plot(m, "outage.png", "p99 latency through the outage")
}

func (h *harness) mdPropagation(m *md) {
	p := h.res.Propagation
	if p == nil {
		return
	}
	m.section(fmt.Sprintf("6. Rule propagation (real kube-apiserver + etcd, `tollgate controller`, %d gateway processes)", p.Gateways), "A RateLimitRule's capacity is patched %d times; the delay is from just before the API write to the moment every gateway answers with the new `X-RateLimit-Limit` (each polled every %.0f ms).", p.Changes, p.PollMs)
	m.table([]string{"changes", "p50 ms", "p99 ms", "max ms", "all (ms)"}, [][]string{{fmt.Sprint(p.Changes), fmt.Sprintf("%.0f", p.P50), fmt.Sprintf("%.0f", p.P99), fmt.Sprintf("%.0f", p.Max), joinF(p.DelaysMs)}})
}

func joinF(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, ", ")
}

func (h *harness) mdScale(m *md) {
	s := h.res.Scale
	if s == nil {
		return
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	m.para("## 7. Memory and scale")
	m.table([]string{"what", "measured", "baseline / note"}, [][]string{
		{fmt.Sprintf("Redis bytes per bucket (%d buckets from the script, pipelined)", s.Buckets), fmt.Sprintf("%.1f B", s.RedisBytesPerBkt),
			fmt.Sprintf("`INFO memory` used_memory delta / buckets: key, hash, expiry entry and dict overhead; five routes per tenant, a tenant's buckets in one hash; `MEMORY USAGE` of one tenant's key (5 buckets): %d B (without the expiry entry); %d keys with expiry", s.MemoryUsageSample, s.ExpiresCount)},
		{fmt.Sprintf("gateway RSS with %d rules (%d shards, %d KiB compressed)", s.Rules, s.Shards, s.SnapshotBytes>>10), mib(s.RSS),
			fmt.Sprintf("idle gateway on an empty snapshot: %s → **%+.1f MiB**", mib(s.RSSIdle), float64(s.RSSDelta)/(1<<20))},
		{"gateway Go heap in use after a forced GC", fmt.Sprintf("%.1f MiB", s.HeapInuse/(1<<20)), fmt.Sprintf("idle: %.1f MiB", s.HeapInuseIdle/(1<<20))},
		{"gateway start → /readyz 200 (Kubernetes mode)", fmt.Sprintf("%.3f s", s.ReadySeconds), fmt.Sprintf("idle: %.3f s", s.ReadySecondsIdle)},
		{"controller publish, `go test -bench '" + s.PublishBench + "' -benchtime 1x ./controllers/`", fmt.Sprintf("%.3f s", s.PublishSeconds), "compile + write every shard ConfigMap to a real API server (cold)"},
	})
	if a := s.Addresses; a != nil {
		m.para("Per-address buckets (`by: [{clientAddress: {}}]`, 5 per minute, the login example): many and short-lived.")
		m.table([]string{"what", "measured", "note"}, [][]string{
			{fmt.Sprintf("Redis bytes per bucket (%d addresses, half IPv4 /32, half IPv6 /64)", a.Addresses), fmt.Sprintf("%.1f B", a.BytesPerBkt),
				fmt.Sprintf("`used_memory_dataset` delta / buckets (`used_memory` delta: %.1f B, with the key space's dict and expiry entries): one hash per address, the address its hash tag; `MEMORY USAGE` of one: %d B", a.UsedMemoryPerBkt, a.MemoryUsage)},
			{"TTL of a bucket just written", fmt.Sprintf("%d ms", a.TTLMs), fmt.Sprintf("twice a full refill (%d ms): an address idle that long leaves Redis", a.ExpectedTTLMs)},
			{fmt.Sprintf("gateway Go heap after a forced GC: before → after one identified request from each of %d addresses and one without a credential from each of %d others → after as many new ones (%d admitted, %d 401, %d 429, %.0f of them by the local fallback: calls past --redis-max-wait)", a.Addresses, a.Addresses, a.Admitted, a.Refused401, a.Refused429, a.Refused429Local),
				fmt.Sprintf("%.1f → %.1f → %.1f MiB", a.HeapBeforeMiB, a.HeapMidMiB, a.HeapAfterMiB),
				fmt.Sprintf("RSS %.1f → %.1f MiB in %.1f s; bounded: the limiter cache and the local fallback keep at most 100,000 buckets, the failed-identification throttle --identity-failure-max-addresses (65,536) addresses and as many prefixes; explain for one address answered: %v", a.RSSBeforeMiB, a.RSSAfterMiB, a.Seconds, a.ExplainOK)},
		})
	}
}

func loadSummary(l map[string][2]float64) string {
	var parts []string
	for _, name := range scenarioNames {
		if v, ok := l[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f→%.1f", name, v[0], v[1]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (h *harness) mdRLS(m *md) {
	r := h.res.RLS
	if r == nil {
		return
	}
	m.section("8. Envoy rate limit service (baseline: classic)", "%d callers, first each a closed loop of unary `ShouldRateLimit` calls over one shared HTTP/2 connection (as Envoy sends them), for %s after %s of warm-up, in %d rounds: each mode's gateway and the floor driven in turn for a round's share of the time, so that the machine's load changing during the run weighs on them alike; one descriptor per call, tenants from the mix (%s). Rule: %s. Reference: Envoy's Go ratelimit service, ~%d decisions/s at ~%d µs CPU per decision (%.0f decisions per CPU-second) and %d Redis commands per decision; the target is at least 2× its decisions per CPU-second.",
		r.Streams, h.plan.RLSDur, h.plan.Warmup, rlsRounds, r.Mix, r.Rule, refRLSDecisionsPerSecond, refRLSCPUMicrosPerDec, 1e6/refRLSCPUMicrosPerDec, refRLSRedisPerDecision)
	m.table(rlsColumns, rlsRows(r.RLSPass))
	m.p("floor: a grpc-go server (this harness, `-serve-rls-floor`, with the service's gRPC server options) answering every call with one constant OK, under the same callers: the least a rate limit service on grpc-go costs; the target is at most 1.4× its CPU per call. local: the same service deciding with `--limiter=local` (no Redis), so that the cost of the Redis path (batched − local) and of the rest of the service (local − floor) stand apart. CPUs: %s.", h.res.Meta.Pinning)
	for _, p := range r.Steady {
		why := "the reference's rate"
		if p.Busy > 0 {
			why = fmt.Sprintf("%.0f %% of what the batched mode answered in its closed loop: near the default mode's ceiling", 100*p.Busy)
		}
		m.p("The same targets again at a steady %d calls/s between the callers (%s), in %d rounds of %s in all: every target does the same work per second, where closed loops give each as many calls as it answers (and a faster target more calls to share each system call and wake-up). Latencies count from when a call was due; a target whose decisions/s fall short of the rate could not keep up.",
			p.Rate, why, rlsRounds, rlsPacedDur(h.plan))
		m.table(rlsColumns, rlsRows(p))
	}
	h.mdRLSProfiles(m, r.Modes)
}

// rlsColumns head the rls scenario's tables.
var rlsColumns = []string{"mode", "decisions/s", "failed calls", "p50 ms", "p99 ms", "gateway CPU µs/decision", "vs floor", "decisions per CPU-second", "vs reference", "script calls/decision", "round trips/decision", "redis-server CPU µs/decision"}

// rlsRows are one pass's rows: the modes, then the floor.
func rlsRows(p RLSPass) [][]string {
	runs := p.Modes
	if p.Floor != nil {
		runs = append(runs[:len(runs):len(runs)], *p.Floor)
	}
	var rows [][]string
	for _, x := range runs {
		rows = append(rows, []string{x.Mode, fmt.Sprintf("%.0f", x.PerSecond), fmt.Sprint(x.Failed), f3(x.P50), f3(x.P99),
			f1(x.CPUPerDecision), floorRatio(x), fmt.Sprintf("%.0f", x.PerCPUSecond), xr(x.VsReference),
			fmt.Sprintf("%.4f", x.ScriptCallsPerDec), fmt.Sprintf("%.4f", x.RoundTripsPerDec), f1(x.RedisCPUPerDecision)})
	}
	return rows
}

// mdRLSProfiles shows where each mode's CPU went.
func (h *harness) mdRLSProfiles(m *md, runs []RLSRun) {
	for _, x := range runs {
		p := x.Profile
		if p == nil {
			continue
		}
		m.details(fmt.Sprintf("%s: CPU profile (%s of load after the measured run, `%s`): %s", x.Mode, h.plan.ProfileDur, p.File, strings.Join(p.Roots, ", ")), p.Top)
	}
}

func (h *harness) mdLimits(m *md) {
	r := h.res.Limits
	if r == nil {
		return
	}
	m.section("9. Limits beyond the token bucket (baseline: the plain token bucket)", "One gateway and one Redis per rule kind, %d req/s for %s after %s of warm-up, tenants from the mix; the rule (tenant *, route bench) has a bucket too large to reject, so every request is forwarded and each row is the cost of its limit. Script calls are counted by Redis (`INFO commandstats`): each is one call from the gateway, so they are the round trips a request costs (fewer when the gateway pipelines calls of several requests together); the commands run count what the scripts do inside Redis (`INFO stats`, `total_commands_processed`).",
		r.Rate, h.plan.LimitsDur, h.plan.Warmup)
	var rows [][]string
	for _, x := range append([]LimitRun{*r.Direct}, r.Kinds...) {
		added, vs := "", ""
		if x.Kind != "direct" {
			added = fmt.Sprintf("%+.3f", x.P99-r.Direct.P99)
			vs = xr(x.VsPlain)
			if x.Kind == "plain" {
				vs = "baseline"
			}
		}
		rows = append(rows, []string{x.Kind, x.About, f3(x.P50), f3(x.P99), added, fmt.Sprint(x.Bad), f1(x.CPUPerRequest), vs,
			fmt.Sprintf("%.2f", x.ScriptsPerReq), fmt.Sprintf("%.2f", x.RedisCmdPerReq)})
	}
	m.table([]string{"rule", "what it adds", "p50 ms", "p99 ms", "added p99 ms (vs direct)", "bad", "gateway CPU µs/request", "CPU vs plain", "script calls/request (round trips)", "Redis commands run/request"}, rows)
}

func (h *harness) mdHTTP2(m *md) {
	r := h.res.HTTP2
	if r == nil {
		return
	}
	m.section("11. HTTP/2 and gRPC (baselines: HTTP/1.1 on the same route; a bare h2 reverse proxy)", "One gateway with `--h2c`, rule %s, tenants: %s; %d requests/s for %s after %s of warm-up per row, in one run. The measured process (the gateway, or the floor) runs alone on the measured CPU, the load, the upstreams and Redis on the others. The gRPC rows call `grpc.health.v1.Health/Check` on a grpc-go server over one h2c connection from a grpc-go client; the floor is `httputil.ReverseProxy` with the gateway's h2c transport, without the limiter.",
		r.Rule, r.Mix, r.Rate, h.plan.HTTP2Dur, h.plan.Warmup)
	var rows [][]string
	for _, x := range r.Rows {
		vs := "baseline"
		if x.Baseline != "" {
			vs = xr(x.VsBaseline) + " " + x.Baseline
		}
		rows = append(rows, []string{x.Name, x.About, f3(x.P50), f3(x.P99), fmt.Sprintf("%d of %d", x.Bad, x.Sent), f1(x.CPUPerRequest), vs})
	}
	m.table([]string{"row", "what", "p50 ms", "p99 ms", "bad", "CPU µs/request", "CPU vs"}, rows)
}

func (h *harness) mdRegions(m *md) {
	r := h.res.Regions
	if r == nil || len(r.Shift) < 2 || len(r.Overhead) < 2 {
		return
	}
	m.section("12. Region shares that follow the traffic (baseline: the static split)", "Two regions, each a redis-server and a gateway (`--region`), rule %s. The load moved to %d req/s in eu and %d in us (the rule's rate in all) for %s: under the static split (`regionSplit: Fixed`), then with the region rebalancer (in this process, every 1 s, step 20, smoothing 0.7, confirmation bound 3 s) rewriting the rules file both gateways poll. Served: the requests answered 200.",
		r.Rule, regionsEU, regionsUS, h.plan.RegionsShiftDur)
	var rows [][]string
	for _, x := range r.Shift {
		vs := "baseline"
		if x.Mode == "adaptive" {
			vs = xr(r.ServedRatio)
		}
		rows = append(rows, []string{x.Mode, fmt.Sprint(x.Sent), fmt.Sprint(x.Served), f1(x.PerSecond), fmt.Sprint(x.ServedEU), fmt.Sprint(x.ServedUS), x.Split, vs})
	}
	m.table([]string{"split", "sent", "served", "served/s", "served in eu", "served in us", "shares in force at the end", "served vs static"}, rows)
	m.para("What recording the demand costs a decision (target: no extra round trip, < 5 %% CPU per decision): two gateways of region eu on one redis-server, a rule split between regions that never refuses, %d req/s of one tenant for %s per mode and round, %d round(s), the modes in turn; one gateway records demand (`--region-demand-window 250ms`), the other not (`0s`). Round trips from the gateway's counters, script calls from Redis's `INFO commandstats`.",
		h.plan.RegionsRate, h.plan.CostDur, h.plan.RegionsRounds)
	rows = nil
	for _, x := range r.Overhead {
		rows = append(rows, []string{x.Mode, fmt.Sprintf("%.0f", x.Decisions), fmt.Sprintf("%.4f", x.RoundTripsPerDec), fmt.Sprintf("%.4f", x.ServerCallsPerDec), f1(x.CPUPerDecision), f1(x.RedisCPUPerDecision)})
	}
	m.table([]string{"mode", "decisions", "round trips/decision", "script calls/decision (Redis)", "gateway CPU µs/decision", "redis-server CPU µs/decision"}, rows)
	m.para("Recording vs not: gateway CPU per decision %s, redis-server CPU per decision %s.", xr(r.CPURatio), xr(r.RedisCPURatio))
}
