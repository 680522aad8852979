package main

import "testing"

func TestCheckTargets(t *testing.T) {
	h := &harness{res: &Results{
		Propagation: &PropagationResult{Changes: 3, P99: 1500, P50: 200},
		Outage:      &OutageResult{OpenAfterMs: 40, PollMs: 5, During: &loadResult{Sent: 10}, Before: &loadResult{Sent: 10}},
	}}
	got := map[string]TargetCheck{}
	for _, c := range h.checkTargets() {
		got[c.What] = c
	}
	for what, status := range map[string]string{
		"rule change to enforcement on every replica": "missed", // p99 1.5 s > 1 s
		"breaker open after Redis dies":               "met",
		"no request pays the timeout once open":       "met",
		"added latency p99 at 2,500 req/s":            "n/a", // not run
		"gateway CPU per limiter decision":            "n/a", // not run
	} {
		if c, ok := got[what]; !ok || c.Status != status {
			t.Errorf("%s: %+v, want status %s", what, c, status)
		}
	}
	if c := got["added latency p99 at 2,500 req/s"]; c.Measured != "not run" || c.Target != "≤ 1 ms over direct" {
		t.Errorf("scenario not run: %+v", c)
	}
	// Optional targets of scenarios that did not run have no row.
	if _, ok := got["Redis round trips per decision"]; ok {
		t.Error("optional target without results has a row")
	}
}
