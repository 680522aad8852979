package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

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

// TestRLSJudgedAtSteadyRates: the rate limit service's ratio to the floor
// is judged on the steady passes (the same work for every target); the
// closed loop is shown, and judged only when no steady pass ran.
func TestRLSJudgedAtSteadyRates(t *testing.T) {
	pass := func(rate int, busy, batchedCPU, batchedRate, floorCPU, floorRate float64) RLSPass {
		return RLSPass{Rate: rate, Busy: busy,
			Modes: []RLSRun{{Mode: "batched", CPUPerDecision: batchedCPU, PerSecond: batchedRate, VsFloor: round(batchedCPU/floorCPU, 2)}},
			Floor: &RLSRun{Mode: "floor", CPUPerDecision: floorCPU, PerSecond: floorRate}}
	}
	closed := pass(0, 0, 40, 19000, 23, 27550)
	rows := func(r *RLSResult) []TargetCheck {
		h := &harness{res: &Results{RLS: r}}
		var out []TargetCheck
		for _, c := range h.checkTargets() {
			if c.What == "rate limit service CPU per decision" {
				out = append(out, c)
			}
		}
		return out
	}

	got := rows(&RLSResult{RLSPass: closed, Steady: []RLSPass{pass(8000, 0, 91, 8000, 70, 8000), pass(14000, 0.75, 55, 14000, 36, 14000)}})
	want := []struct{ status, measured, note string }{
		{"n/a", "closed loop: 40.0 µs vs 23.0 µs: 1.74×", "not judged: a closed loop gives each target as many calls as it answers (here the floor answered 1.45× the batched mode's calls per second)"},
		{"met", "steady 8000/s: 91.0 µs vs 70.0 µs: 1.30×", "every target at the same rate"},
		{"missed", "steady 14000/s (75 % of batched's closed loop): 55.0 µs vs 36.0 µs: 1.53×", "every target at the same rate"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if c := got[i]; c.Status != w.status || c.Measured != w.measured || !strings.Contains(c.Note, w.note) {
			t.Errorf("row %d: %+v, want status %s, measured %q, a note with %q", i, c, w.status, w.measured, w.note)
		}
	}

	// Without a steady pass the closed loop is all there is: judged.
	if got := rows(&RLSResult{RLSPass: closed}); len(got) != 1 || got[0].Status != "missed" || strings.Contains(got[0].Note, "not judged") {
		t.Errorf("closed loop alone: %+v, want one row, missed", got)
	}
}

func TestRLSSteadyPasses(t *testing.T) {
	closed := RLSPass{Modes: []RLSRun{{Mode: "classic", PerSecond: 11891}, {Mode: "batched", PerSecond: 19222}, {Mode: "local", PerSecond: 26931}}}
	for _, tc := range []struct {
		name string
		p    plan
		want []RLSPass
	}{
		{"full", plan{RLSRate: 8000, RLSBusy: 0.75}, []RLSPass{{Rate: 8000}, {Rate: 14000, Busy: 0.75}}}, // 14416
		{"no busy pass", plan{RLSRate: 8000}, []RLSPass{{Rate: 8000}}},
		{"busy only", plan{RLSBusy: 0.02}, []RLSPass{{Rate: 380, Busy: 0.02}}}, // 384
		{"none", plan{}, nil},
	} {
		if got := rlsSteadyPasses(tc.p, closed); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for n, want := range map[int]int{0: 0, 7: 7, 99: 99, 100: 100, 384: 380, 14416: 14000, 1_234_567: 1_200_000} {
		if got := twoDigits(n); got != want {
			t.Errorf("twoDigits(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestOutageJudgedOnTheGatewaysCount: "no request pays the timeout once
// open" is the gateway's count of requests that waited for Redis, not the
// client's latencies, which a busy machine stretches too.
func TestOutageJudgedOnTheGatewaysCount(t *testing.T) {
	for _, tc := range []struct {
		waited float64
		slow   int
		want   string
	}{{0, 26, "met"}, {3, 0, "missed"}} {
		h := &harness{res: &Results{Outage: &OutageResult{WaitedOpen: tc.waited, SlowDuring: tc.slow,
			During: &loadResult{Sent: 12000}, Before: &loadResult{Sent: 10000}}}}
		for _, c := range h.checkTargets() {
			if c.What == "no request pays the timeout once open" && (c.Status != tc.want || !strings.Contains(c.Note, fmt.Sprintf("%d of 12000", tc.slow))) {
				t.Errorf("waited %v, slow %d: %+v, want %s", tc.waited, tc.slow, c, tc.want)
			}
		}
	}
}
