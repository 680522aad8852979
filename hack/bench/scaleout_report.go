package main

import (
	"fmt"
	"strings"
)

// mdScaleOut writes section 10: the passes, each master, the operations
// and the steady rates.
func (h *harness) mdScaleOut(m *md) {
	r := h.res.ScaleOut
	if r == nil {
		return
	}
	m.section("10. Scale-out on a Redis Cluster (baseline: the same load on 3 masters)", "%d gateways' limiter chains, %d decisions/s offered for %s per pass (constant rate, open loop; the pass named with another rate at that rate, every rule scaled to it) over %s. Rules: %s. %s. The exact count is an exact token bucket per tenant run over the same decisions (their times in this process); Redis CPU is `INFO cpu` (used_cpu_sys + used_cpu_user) of every master, script calls `INFO commandstats`, bytes per bucket `used_memory_dataset` over `DBSIZE` at the end of the load (a bucket per key; the key dictionaries' own overhead is not in it: section 7 has the whole figure).",
		r.Gateways, h.plan.ScaleOutRate, h.plan.ScaleOutDur, r.Mix, r.Rule, r.Note)
	var rows [][]string
	for _, p := range r.Passes {
		rows = append(rows, []string{p.Name, fmt.Sprint(p.Round), fmt.Sprint(p.Decisions), fmt.Sprint(p.Admitted), fmt.Sprint(p.Exact), pct(p.Error),
			fmt.Sprintf("%s (%d vs %d)", pct(p.HotError), p.HotAdmitted, p.HotExact), fmt.Sprint(p.Local),
			fmt.Sprintf("%.4f", p.RoundTripsPerDec), fmt.Sprintf("%.4f", p.ScriptCallsPerDec), f1(p.GatewayCPUPerDec),
			fmt.Sprintf("%.4f", p.RedisCPUPer1000), fmt.Sprintf("%.0f", p.DecPerRedisCPUSec), xr(p.MaxMeanCPU), xr(p.MaxMeanCalls), f1(p.BytesPerBucket)})
	}
	m.table([]string{"pass", "round", "decisions", "admitted", "exact", "error", "hot tenant error", "off Redis", "round trips/decision", "script calls/decision",
		"gateway CPU µs/decision", "Redis CPU-s per 1,000 decisions", "decisions per Redis CPU-second", "max/mean master CPU", "max/mean script calls", "Redis bytes/bucket"}, rows)
	h.mdEfficiency(m, r.Passes)
	for _, p := range r.Passes {
		if p.Round <= 1 {
			h.mdMasters(m, p)
		}
	}
	h.mdOps(m, r.Ops)
	h.mdSteady(m, r.Steady)
}

// mdEfficiency is the scaling efficiency pooled over the rounds.
func (h *harness) mdEfficiency(m *md, ps []SOPass) {
	s, ok := soScalingOf(h.plan, ps)
	if !ok {
		return
	}
	m.para("**Scaling efficiency** (decisions per Redis CPU-second, every round's passes pooled: %d each): %d masters at %d/s %.0f; %d masters at %d/s, each master as loaded as the %d at %d/s, %.0f: **%.2f** with each master at the same load; %d masters at %d/s %.0f: %.2f at the same total rate, where each of the %d masters carries %d/%d of the load of each of the %d. "+
		"A redis-server less busy spends more CPU per call: it wakes up for fewer calls at a time (the %d-master passes at the two rates, %.0f and %.0f, show it on the same cluster). Sizing caps each master's CPU, so the figure to scale by is the one at the same load per master.",
		s.rounds, s.large, s.rate, s.big, s.small, s.sameRate, s.large, s.rate, s.same, s.big/s.same, s.small, s.rate, s.whole, s.big/s.whole, s.large, s.small, s.large, s.small, s.small, s.same, s.whole)
}

func pct(x float64) string { return fmt.Sprintf("%+.2f %%", 100*x) }

// mdMasters is one pass's table of masters.
func (h *harness) mdMasters(m *md, p SOPass) {
	var rows [][]string
	for _, x := range p.MastersDetail {
		what := x.Addr
		if x.Addr == p.HotMaster {
			what += " (the hot tenant's)"
		}
		rows = append(rows, []string{what, fmt.Sprint(x.Slots), fmt.Sprintf("%.0f", x.Decisions), fmt.Sprintf("%.0f", x.CommandsPS), fmt.Sprint(x.ScriptCalls),
			fmt.Sprintf("%.4f", x.CallsPerDec), fmt.Sprintf("%.3f", x.CPUSeconds), fmt.Sprintf("%.4f", x.CPUPer1000), fmt.Sprintf("%.1f %%", 100*x.Busy), fmt.Sprint(x.Keys), f1(x.BytesPerBkt)})
	}
	m.para("**%s**: per master (decisions attributed by their keys' slots; a sharded bucket's evenly over its shards' masters):", p.Name)
	m.table([]string{"master", "slots", "decisions", "commands/s", "script calls", "script calls/decision", "CPU s", "CPU-s per 1,000 decisions", "CPU busy", "keys", "bytes/bucket"}, rows)
	if !p.Shards && p.MaxMeanCPU > 0 {
		m.para("Without shards the hot tenant's master does %.2f× the mean master's CPU: with every master capped at 70 %% CPU, the cluster's capacity is %.0f %% of what an even spread would give.", p.MaxMeanCPU, 100/p.MaxMeanCPU)
	}
}

// mdOps is the operations pass.
func (h *harness) mdOps(m *md, o *SOOps) {
	if o == nil {
		return
	}
	m.para("**The Cluster's operations under load**: %d masters with %d replica each, the gateway's default deadlines (--redis-timeout 5ms, --redis-max-wait 100ms, breaker defaults), hot tenants sharded; %d decisions in %.1f s, admitted %d vs exact %d (%s), %d decided off Redis. Off Redis: refused after a failed call while the node's breaker was closed, or decided by the local buckets once it opened; admitted: of those, passed.",
		o.Masters, o.Replicas, o.Decisions, o.Seconds, o.Admitted, o.Exact, pct(o.Error), o.Local)
	var rows [][]string
	for _, s := range o.Steps {
		rows = append(rows, []string{s.What, fmt.Sprintf("%.1f–%.1f", s.From, s.To), fmt.Sprint(s.Decisions), fmt.Sprint(s.Local), fmt.Sprint(s.LocalAdmitted), s.Note})
	}
	m.table([]string{"operation", "seconds", "decisions", "off Redis", "of them admitted", "what"}, rows)
	rows = nil
	for _, t := range o.Tenants {
		rows = append(rows, []string{t.Tenant, t.Why, fmt.Sprint(t.Admitted), fmt.Sprint(t.Exact), pct(relErr(t.Admitted, t.Exact)), fmt.Sprint(t.Local)})
	}
	m.table([]string{"tenant", "", "admitted", "exact", "error", "off Redis"}, rows)
}

// mdSteady is one chain at steady rates, with the gateway's defaults and
// with every call through the workers (the baseline).
func (h *harness) mdSteady(m *md, ss []SOSteady) {
	if len(ss) == 0 {
		return
	}
	m.para("**One gateway's limiter at steady rates** (one chain on one redis-server; tenants of the mix of sections 1-3 on a bucket too large to refuse; this process pinned as above, its CPU per decision includes the pacing and a goroutine per decision; CPU profile `profile-steady-<rate>[-workers].pb.gz`). Each rate twice: with the gateway's defaults, where a decision that comes after a quiet gap (`limiter.DefaultSoloGap`) with nothing queued or in flight is sent by its own goroutine (a solo send), and with every call through the Batcher's workers, the design before, as the baseline:")
	var rows [][]string
	base := map[int]float64{}
	for _, s := range ss {
		if s.Workers {
			base[s.Rate] = s.CPUPerDec
		}
	}
	for _, s := range ss {
		mode, ratio := "defaults", "1.00× (baseline)"
		if !s.Workers {
			ratio = "n/a"
			if b := base[s.Rate]; b > 0 {
				ratio = fmt.Sprintf("%.2f×", s.CPUPerDec/b)
			}
		} else {
			mode = "workers only"
		}
		rows = append(rows, []string{fmt.Sprint(s.Rate), mode, fmt.Sprint(s.Decisions), fmt.Sprintf("%.4f", s.RoundTripsPerDec), fmt.Sprintf("%.4f", s.CallsPerDec),
			fmt.Sprintf("%.4f", s.SoloPerDec), f1(s.CPUPerDec), ratio, f1(s.RedisCPUPerDec), strings.Join(s.Cum, ", ")})
	}
	m.table([]string{"decisions/s", "sends", "decisions", "round trips/decision", "script calls/decision", "solo sends/decision", "CPU µs/decision", "vs workers only", "redis-server CPU µs/decision", "cumulative shares"}, rows)
	for _, s := range ss {
		if len(s.Top) > 0 && !s.Workers {
			m.details(fmt.Sprintf("%d/s: heaviest functions (flat)", s.Rate), s.Top)
		}
	}
}
