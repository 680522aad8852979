package main

import (
	"fmt"
	"math"
)

// checkTargets compares the results with DESIGN.md §6.
func (h *harness) checkTargets() []TargetCheck {
	r := h.res
	var out []TargetCheck
	add := func(what, target string, measured string, ok, measuredOK bool, note string) {
		status := "n/a"
		if measuredOK {
			status = "missed"
			if ok {
				status = "met"
			}
		}
		out = append(out, TargetCheck{What: what, Target: target, Measured: measured, Status: status, Note: note})
	}

	// Added latency at 2,500 req/s.
	if r.Latency != nil {
		for _, s := range r.Latency.Steps {
			if s.Rate == 2500 {
				add("added latency p99 at 2,500 req/s", "≤ 1 ms over direct",
					fmt.Sprintf("%+.3f ms (p99 %.3f vs %.3f ms direct)", s.AddedP99, s.Gateway.P99, s.Direct.P99), s.AddedP99 <= 1, true, "")
			}
		}
		// CPU per proxied request against nginx proxying the same traffic.
		for _, n := range r.Latency.Nginx {
			for _, s := range r.Latency.Steps {
				if s.Rate != n.Rate || n.CPUPerRequest <= 0 {
					continue
				}
				ratio := s.CPUPerRequest / n.CPUPerRequest
				add(fmt.Sprintf("gateway CPU per proxied request at %d req/s", s.Rate), "≤ 2× nginx's",
					fmt.Sprintf("%.1f µs vs nginx %.1f µs: %.2f×", s.CPUPerRequest, n.CPUPerRequest, ratio), ratio <= 2, true,
					"the gateway also decides (Redis call included); nginx only proxies")
			}
		}
	} else {
		add("added latency p99 at 2,500 req/s", "≤ 1 ms over direct", "not run", false, false, "")
	}

	// Redis round trips per request.
	if r.RedisCost != nil {
		for _, m := range r.RedisCost.Modes {
			if m.Hot == nil || m.Mix == nil {
				continue
			}
			if m.Mode == "prefetch" {
				add("Redis round trips per decision, hot tenant, prefetch", "≤ 0.05",
					fmt.Sprintf("%.4f (mix: %.4f)", m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec), m.Hot.RoundTripsPerDec <= 0.05, true, "")
			} else {
				worst := math.Max(m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec)
				add("Redis round trips per decision, "+m.Mode, "≤ 1",
					fmt.Sprintf("%.4f hot tenant, %.4f mix", m.Hot.RoundTripsPerDec, m.Mix.RoundTripsPerDec), worst <= 1, true, "")
			}
		}
	} else {
		add("Redis round trips per decision, hot tenant, prefetch", "≤ 0.05", "not run", false, false, "")
	}

	// Accuracy.
	if r.Accuracy != nil {
		for _, c := range r.Accuracy.Cases {
			if c.Instances != 20 {
				continue
			}
			switch c.Case {
			case "healthy":
				add("admitted vs ideal, 20 instances, Redis healthy", "within ±2 %", fmt.Sprintf("%+.2f %%", 100*c.Error), c.Within, true, "")
			case "prefetch":
				add("admitted vs ideal, 20 instances, prefetch Auto", "within ±5 % (the rule's error budget)", fmt.Sprintf("%+.2f %%", 100*c.Error), c.Within, true, "not a DESIGN.md row; prefetch trades exactness for round trips")
			case "outage":
				add("admitted vs ideal, 20 instances, Redis outage", "within ±10 %", fmt.Sprintf("%+.2f %%", 100*c.Error), c.Within, true, "")
			}
		}
	} else {
		add("admitted vs ideal, 20 instances, Redis healthy", "within ±2 %", "not run", false, false, "")
	}

	if p := r.Propagation; p != nil && p.Changes > 0 {
		add("rule change to enforcement on every replica", "p99 ≤ 1 s", fmt.Sprintf("p99 %.0f ms, p50 %.0f ms (%d changes, 3 gateways)", p.P99, p.P50, p.Changes), p.P99 <= 1000, true, "")
	} else {
		add("rule change to enforcement on every replica", "p99 ≤ 1 s", "not run", false, false, "")
	}

	if o := r.Outage; o != nil && o.During != nil {
		add("breaker open after Redis dies", "≤ 100 ms", fmt.Sprintf("%.0f ms (polled every %.0f ms)", o.OpenAfterMs, o.PollMs), o.OpenAfterMs <= 100, true, "")
		add("no request pays the timeout once open", "0 requests ≥ 5 ms", fmt.Sprintf("%d of %d while open (%d of %d before the kill)", o.SlowDuring, o.During.Sent, o.SlowBefore, o.Before.Sent),
			o.SlowDuring == 0, true, "client-side latency ≥ the 5ms Redis deadline; scheduling noise on a shared 2-core machine counts too, compare with before")
	} else {
		add("breaker open after Redis dies", "≤ 100 ms", "not run", false, false, "")
	}

	if t := r.Throughput; t != nil {
		for _, m := range t.Modes {
			if m.Mode == "batched" && m.Profile != nil {
				add("gateway CPU per limiter decision (Redis client included), default mode", "≤ 30 µs",
					fmt.Sprintf("%.1f µs (%.0f %% of %.1f µs per proxied request, from the CPU profile)", m.Profile.LimiterPerDec, 100*m.Profile.LimiterShare, m.Profile.CPUPerRequest),
					m.Profile.LimiterPerDec <= 30, true, "the whole gateway process, proxying included, is the second figure")
			}
		}
	} else {
		add("gateway CPU per limiter decision", "≤ 30 µs", "not run", false, false, "")
	}

	if s := r.Scale; s != nil {
		quick := h.cfg.quick
		note := ""
		if quick {
			note = "quick run: smaller sizes, not a measurement of the target"
		}
		if s.RedisBytesPerBkt > 0 {
			add("Redis memory per bucket, expiry index included", "≤ 100 bytes",
				fmt.Sprintf("%.1f bytes (used_memory delta over %d buckets); MEMORY USAGE of one key %d", s.RedisBytesPerBkt, s.Buckets, s.MemoryUsageSample),
				s.RedisBytesPerBkt <= 100, true, "")
		}
		if s.RSS > 0 {
			add(fmt.Sprintf("data-plane memory with %d rules", s.Rules), "≤ 50 MB",
				fmt.Sprintf("%+.1f MiB RSS over an idle gateway (%.1f vs %.1f MiB)", float64(s.RSSDelta)/(1<<20), float64(s.RSS)/(1<<20), float64(s.RSSIdle)/(1<<20)),
				s.RSSDelta <= 50<<20, !quick, note)
		}
		if s.PublishSeconds > 0 {
			add("controller sync of "+s.PublishBench, "≤ 5 s", fmt.Sprintf("%.2f s", s.PublishSeconds), s.PublishSeconds <= 5, !quick && !raceEnabled, note)
		}
	}
	return out
}
