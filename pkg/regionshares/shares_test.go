package regionshares

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// two is a rule split between eu and us, heard at t0, with known demand.
func two(eu, us int32, deu, dus float64) State {
	return State{Regions: []Region{
		{Name: "eu", Percent: eu, Demand: deu, Known: true, LastHeard: t0},
		{Name: "us", Percent: us, Demand: dus, Known: true, LastHeard: t0},
	}}
}

func heard(rate float64) Observation { return Observation{Reachable: true, Heard: true, Rate: rate} }

func percents(st State) []int32 {
	out := make([]int32, len(st.Regions))
	for i, r := range st.Regions {
		out[i] = r.Percent
	}
	return out
}

func targetsOf(st State) []int32 {
	out := make([]int32, len(st.Regions))
	for i, r := range st.Regions {
		out[i] = r.Target
	}
	return out
}

// TestStep: one interval of the rebalancer, case by case.
func TestStep(t *testing.T) {
	cfg := Config{Floor: 5, MaxStep: 20, Smoothing: 1, Hysteresis: 3, SilentAfter: time.Minute, ConfirmWithin: 30 * time.Second}
	cases := []struct {
		name string
		st   State
		obs  map[string]Observation
		at   time.Duration // after t0
		// want: the kind of step, the shares in force after it, the targets
		// (nil: no change in progress), a piece of Why.
		kind    Kind
		percent []int32
		target  []int32
		why     string
	}{
		{name: "demand 90/10 from 50/50: the shrinking region is lowered first, by at most the step",
			st: two(50, 50, 0, 0), obs: map[string]Observation{"eu": heard(9), "us": heard(1)},
			kind: Lowered, percent: []int32{50, 30}, target: []int32{70, 30}, why: "demand eu=9/s us=1/s"},
		{name: "demand matching the split: unchanged",
			st: two(50, 50, 5, 5), obs: map[string]Observation{"eu": heard(5), "us": heard(5)},
			kind: Unchanged, percent: []int32{50, 50}},
		{name: "a move smaller than the hysteresis is not made",
			st: two(50, 50, 5, 5), obs: map[string]Observation{"eu": heard(5.2), "us": heard(4.8)},
			kind: Unchanged, percent: []int32{50, 50}},
		{name: "the floor holds for a region with no demand left",
			st: two(10, 90, 0, 9), obs: map[string]Observation{"eu": heard(0.0001), "us": heard(100)},
			kind: Lowered, percent: []int32{5, 90}, target: []int32{5, 95}},
		{name: "the rule's own floor for a region",
			st:   func() State { s := two(30, 70, 0, 0); s.Regions[0].Floor = 25; return s }(),
			obs:  map[string]Observation{"eu": heard(0.0001), "us": heard(100)},
			kind: Lowered, percent: []int32{25, 70}, target: []int32{25, 75}},
		{name: "an unreachable region keeps its share; the others share the rest",
			st:   State{Regions: []Region{{Name: "a", Percent: 40, Known: true, LastHeard: t0}, {Name: "b", Percent: 30, Known: true, LastHeard: t0}, {Name: "c", Percent: 30, Known: true, LastHeard: t0}}},
			obs:  map[string]Observation{"b": heard(10), "c": heard(50)},
			kind: Lowered, percent: []int32{40, 10, 30}, target: []int32{40, 10, 50}, why: "a unreachable"},
		{name: "a silent region keeps its share before the timeout",
			st: two(50, 50, 5, 5), obs: map[string]Observation{"eu": {Reachable: true}, "us": heard(50)}, at: 30 * time.Second,
			kind: Unchanged, percent: []int32{50, 50}},
		{name: "a silent region decays to its floor after the timeout, by steps",
			st: two(50, 50, 5, 5), obs: map[string]Observation{"eu": {Reachable: true}, "us": heard(5)}, at: 2 * time.Minute,
			kind: Lowered, percent: []int32{30, 50}, target: []int32{30, 70}, why: "eu silent since"},
		{name: "a change in progress waits for the lowered region's confirmation",
			st: func() State {
				s := two(30, 50, 1, 9)
				s.Changing, s.Since = true, t0
				s.Regions[0].Target, s.Regions[0].Lowered, s.Regions[1].Target = 30, true, 70
				return s
			}(),
			obs: map[string]Observation{"eu": {Reachable: true, Heard: true, Rate: 1, MaxShare: 50}, "us": heard(9)}, at: 10 * time.Second,
			kind: Unchanged, percent: []int32{30, 50}, target: []int32{30, 70}},
		{name: "confirmed: the growing region is raised",
			st: func() State {
				s := two(30, 50, 1, 9)
				s.Changing, s.Since = true, t0
				s.Regions[0].Target, s.Regions[0].Lowered, s.Regions[1].Target = 30, true, 70
				return s
			}(),
			obs: map[string]Observation{"eu": {Reachable: true, Heard: true, Rate: 1, MaxShare: 30}, "us": heard(9)}, at: 10 * time.Second,
			kind: Raised, percent: []int32{30, 70}, why: "confirmed"},
		{name: "an unreachable lowered region: raised after the bound",
			st: func() State {
				s := two(30, 50, 1, 9)
				s.Changing, s.Since = true, t0
				s.Regions[0].Target, s.Regions[0].Lowered, s.Regions[1].Target = 30, true, 70
				return s
			}(),
			obs: map[string]Observation{"us": heard(9)}, at: 31 * time.Second,
			kind: Raised, percent: []int32{30, 70}, why: "eu not confirmed within 30s"},
		{name: "shares under 100 without a change: raised at once, nobody lowered",
			st: two(30, 50, 3, 7), obs: map[string]Observation{"eu": heard(3), "us": heard(7)},
			kind: Raised, percent: []int32{30, 70}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := percents(c.st)
			r := Step(cfg, c.st, c.obs, t0.Add(c.at))
			if r.Kind != c.kind {
				t.Errorf("kind %v, want %v (%s)", r.Kind, c.kind, r.Why)
			}
			if got := percents(r.State); !reflect.DeepEqual(got, c.percent) {
				t.Errorf("shares in force %v, want %v (%s)", got, c.percent, r.Why)
			}
			if r.State.Changing != (c.target != nil) {
				t.Errorf("changing %v, want %v", r.State.Changing, c.target != nil)
			} else if c.target != nil && !reflect.DeepEqual(targetsOf(r.State), c.target) {
				t.Errorf("targets %v, want %v", targetsOf(r.State), c.target)
			}
			if !strings.Contains(r.Why, c.why) {
				t.Errorf("why %q, want it to say %q", r.Why, c.why)
			}
			if s := r.State.Sum(); s > 100 {
				t.Errorf("shares in force add up to %d", s)
			}
			if !reflect.DeepEqual(percents(c.st), before) {
				t.Errorf("Step changed its argument")
			}
		})
	}
}

// TestConvergence: demand moved to 90/10 from a 50/50 split; each interval
// the gateways confirm what is in force. The shares reach the demand's
// split within the intervals the step allows (two per change: lower, then
// raise), never add up to more than 100 on the way, and then stay.
func TestConvergence(t *testing.T) {
	cfg := Config{Floor: 5, MaxStep: 20, Smoothing: 0.5, Hysteresis: 3}
	st := State{Regions: []Region{{Name: "eu", Percent: 50, LastHeard: t0}, {Name: "us", Percent: 50, LastHeard: t0}}}
	now := t0
	var got []int32
	for i := 0; i < 12; i++ {
		now = now.Add(10 * time.Second)
		obs := map[string]Observation{
			"eu": {Reachable: true, Heard: true, Rate: 90, MaxShare: st.Regions[0].Percent},
			"us": {Reachable: true, Heard: true, Rate: 10, MaxShare: st.Regions[1].Percent},
		}
		r := Step(cfg, st, obs, now)
		st = r.State
		if s := st.Sum(); s > 100 {
			t.Fatalf("interval %d: shares in force add up to %d", i, s)
		}
		got = append(got, st.Regions[0].Percent)
	}
	if p := st.Regions[0].Percent; p < 87 || p > 90 || st.Changing {
		t.Fatalf("eu's share after 12 intervals: %d (changing %v), want 87 to 90; history %v", p, st.Changing, got)
	}
	// 50 → 90 is two changes of 20 points, two intervals each (the
	// smoothing starts at the first measure).
	if got[3] < 87 {
		t.Errorf("eu's share after 4 intervals: %v, want at 87 or more", got)
	}
}

// TestRestartResumes: the state a rebalancer restarted mid-change reads
// back (status) carries on the change rather than starting over.
func TestRestartResumes(t *testing.T) {
	cfg := Config{ConfirmWithin: time.Minute}
	st := two(50, 50, 9, 1)
	r := Step(cfg, st, map[string]Observation{"eu": heard(9), "us": heard(1)}, t0)
	if r.Kind != Lowered {
		t.Fatalf("first step %v, want Lowered", r.Kind)
	}
	// What status would hold: shares in force, targets, since.
	resumed := r.State
	r2 := Step(cfg, resumed, map[string]Observation{
		"eu": {Reachable: true, Heard: true, Rate: 9, MaxShare: 50},
		"us": {Reachable: true, Heard: true, Rate: 1, MaxShare: 30},
	}, t0.Add(5*time.Second))
	if r2.Kind != Raised || r2.State.Regions[0].Percent != 70 || r2.State.Regions[1].Percent != 30 {
		t.Fatalf("after the restart: %v %v, want the change completed at 70/30", r2.Kind, percents(r2.State))
	}
}

func TestWaterfillAndRounding(t *testing.T) {
	cases := []struct {
		rest   int32
		weight []float64
		floor  []float64
		want   []int32
	}{
		{100, []float64{1, 1, 1}, []float64{5, 5, 5}, []int32{34, 33, 33}},
		{100, []float64{100, 0, 0}, []float64{5, 5, 5}, []int32{90, 5, 5}},
		{60, []float64{3, 1}, []float64{5, 5}, []int32{45, 15}},
		{100, []float64{0, 0}, []float64{5, 5}, []int32{50, 50}},
	}
	for _, c := range cases {
		got := largestRemainder(waterfill(float64(c.rest), c.weight, c.floor), c.rest)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("waterfill(%d, %v, %v) = %v, want %v", c.rest, c.weight, c.floor, got, c.want)
		}
	}
}
