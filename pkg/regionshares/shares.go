// Package regionshares computes the region shares of a rule from the
// demand measured in each region: smoothing, targets proportional to
// demand above a floor, a bounded step per interval, hysteresis, and the
// change in two steps that never lets the shares in force add up to more
// than 100 %. It is pure (no clock, no Redis, no Kubernetes): the region
// rebalancer (controllers) feeds it what it read and writes what it
// returns. docs/regions.md explains the whole.
package regionshares

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config are the rebalancer's knobs; zero fields take the defaults.
type Config struct {
	// Floor is the least share of a region, in percent, unless the rule
	// sets its own (Region.Floor). Default 5.
	Floor int32
	// MaxStep is the most a region's share moves in one interval, in
	// percentage points. Default 20.
	MaxStep int32
	// Smoothing is the weight of the newest interval's demand in the
	// exponentially weighted average, in (0, 1]. Default 0.5.
	Smoothing float64
	// Hysteresis: a change whose largest move is smaller than this many
	// points is not made, so that shares do not flap. Default 3.
	Hysteresis int32
	// SilentAfter: a reachable region whose gateways report nothing keeps
	// its share this long after it was last heard, then decays to its
	// floor. Default 5m.
	SilentAfter time.Duration
	// ConfirmWithin bounds the wait for the lowered regions' confirmation
	// in a change: after it, the growing regions get their shares
	// anyway (a region that cannot be reached). Default 1m.
	ConfirmWithin time.Duration
}

// Defaults of Config.
const (
	DefaultFloor         = 5
	DefaultMaxStep       = 20
	DefaultSmoothing     = 0.5
	DefaultHysteresis    = 3
	DefaultSilentAfter   = 5 * time.Minute
	DefaultConfirmWithin = time.Minute
)

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Floor <= 0 {
		c.Floor = DefaultFloor
	}
	if c.MaxStep <= 0 {
		c.MaxStep = DefaultMaxStep
	}
	if c.Smoothing <= 0 || c.Smoothing > 1 {
		c.Smoothing = DefaultSmoothing
	}
	if c.Hysteresis <= 0 {
		c.Hysteresis = DefaultHysteresis
	}
	if c.SilentAfter <= 0 {
		c.SilentAfter = DefaultSilentAfter
	}
	if c.ConfirmWithin <= 0 {
		c.ConfirmWithin = DefaultConfirmWithin
	}
	return c
}

// Region is one region of a rule as the rebalancer keeps it.
type Region struct {
	Name string
	// Percent is the share in force.
	Percent int32
	// Floor is the rule's floor for the region (spec.regions[].minPercent;
	// 0: Config.Floor).
	Floor int32
	// Min is the least share that can admit anything (one token per
	// shard); 0: 1.
	Min int32
	// Demand is the smoothed demand, tokens asked for per second; Known
	// once it has been measured.
	Demand float64
	Known  bool
	// LastHeard is when the region's gateways last reported demand.
	LastHeard time.Time
	// Target is the share at the end of the change in progress, and
	// Lowered says the first step lowered this region's share; both are
	// meaningful only while State.Changing.
	Target  int32
	Lowered bool
}

// floor is the region's effective floor.
func (r *Region) floor(c *Config) int32 {
	f := c.Floor
	if r.Floor > 0 {
		f = r.Floor
	}
	return max(f, r.Min, 1)
}

// State is a rule's regions and the change in progress, if any.
type State struct {
	Regions []Region
	// Changing: the lowered shares are in force, the raised ones not yet;
	// Since is when the first step was published.
	Changing bool
	Since    time.Time
}

// Sum is the sum of the shares in force.
func (s *State) Sum() int32 {
	var sum int32
	for _, r := range s.Regions {
		sum += r.Percent
	}
	return sum
}

// Split is the shares in force in short form: "eu=70 us=30".
func (s *State) Split() string {
	parts := make([]string, len(s.Regions))
	for i, r := range s.Regions {
		parts[i] = fmt.Sprintf("%s=%d", r.Name, r.Percent)
	}
	return strings.Join(parts, " ")
}

// Observation is what the rebalancer read of one region in one interval.
type Observation struct {
	// Reachable: the region's Redis answered. An unreachable region keeps
	// its share and its demand.
	Reachable bool
	// Heard: the region's gateways keep a demand ring of the rule (they
	// decided for it recently); Rate is the demand of the interval, tokens
	// asked for (admitted and refused) per second, 0 when they decided
	// nothing in it. A region without a ring reports nothing.
	Heard bool
	Rate  float64
	// MaxShare is the largest share in force that the region's gateways
	// decided under in the windows that began at or after State.Since (0:
	// none decided in them): the confirmation of a lowered share.
	MaxShare int32
}

// Kind says what a Step did.
type Kind uint8

const (
	// Unchanged: the shares in force stay.
	Unchanged Kind = iota
	// Lowered: the first step of a change, the shrinking regions' lower
	// shares.
	Lowered
	// Raised: the growing regions got their shares (the second step of a
	// change, or a change that lowers nobody).
	Raised
)

func (k Kind) String() string {
	switch k {
	case Lowered:
		return "Lowered"
	case Raised:
		return "Raised"
	}
	return "Unchanged"
}

// Result is one Step's outcome.
type Result struct {
	State State
	Kind  Kind
	// Why explains the change (the demand behind it, a confirmation or
	// its bound, a silent region's decay); empty when Unchanged.
	Why string
}

// Step advances st by one interval at now, given each region's
// observation (a region missing from obs is unreachable). It never
// returns shares in force that add up to more than 100 (when st's do
// not): a change lowers first and raises only once every lowered region
// confirmed its lower share, or ConfirmWithin after it was published.
func Step(c Config, st State, obs map[string]Observation, now time.Time) Result {
	c = c.WithDefaults()
	st = clone(st)
	smooth(&c, &st, obs, now)
	if st.Changing {
		return finish(&c, st, obs, now)
	}
	targets, why := targets(&c, &st, obs, now)
	return start(&c, st, targets, why, now)
}

// clone copies st's regions, so that Step never writes its argument's.
func clone(st State) State {
	st.Regions = append([]Region(nil), st.Regions...)
	return st
}

// smooth folds each heard region's rate into its average.
func smooth(c *Config, st *State, obs map[string]Observation, now time.Time) {
	for i := range st.Regions {
		r := &st.Regions[i]
		o, ok := obs[r.Name]
		if !ok || !o.Reachable || !o.Heard {
			continue
		}
		if r.Known {
			r.Demand = c.Smoothing*o.Rate + (1-c.Smoothing)*r.Demand
		} else {
			r.Demand, r.Known = o.Rate, true
		}
		if o.Rate > 0 {
			r.LastHeard = now
		}
	}
}

// finish completes the change in progress when every lowered region
// confirmed its share, or when ConfirmWithin has passed.
func finish(c *Config, st State, obs map[string]Observation, now time.Time) Result {
	var waiting []string
	for _, r := range st.Regions {
		if !r.Lowered {
			continue
		}
		if o, ok := obs[r.Name]; !ok || !o.Reachable || o.MaxShare == 0 || o.MaxShare > r.Percent {
			waiting = append(waiting, r.Name)
		}
	}
	why := "every lowered region confirmed its share"
	if len(waiting) > 0 {
		if now.Sub(st.Since) < c.ConfirmWithin {
			return Result{State: st}
		}
		why = fmt.Sprintf("%s not confirmed within %s", strings.Join(waiting, ", "), c.ConfirmWithin)
	}
	for i := range st.Regions {
		r := &st.Regions[i]
		r.Percent, r.Target, r.Lowered = r.Target, 0, false
	}
	st.Changing, st.Since = false, time.Time{}
	return Result{State: st, Kind: Raised, Why: why + "; " + demandNote(&st)}
}

// start begins the change to targets, if it is worth making: bounded by
// MaxStep, above the hysteresis, lowering before raising.
func start(c *Config, st State, targets []int32, why string, now time.Time) Result {
	delta := make([]int32, len(st.Regions))
	for i, r := range st.Regions {
		delta[i] = max(-c.MaxStep, min(c.MaxStep, targets[i]-r.Percent))
	}
	balance(delta, 100-st.Sum())
	var largest int32
	for _, d := range delta {
		largest = max(largest, abs(d))
	}
	if largest < c.Hysteresis || allZero(delta) {
		return Result{State: st}
	}
	lowers := false
	for i := range st.Regions {
		if delta[i] < 0 {
			lowers = true
		}
	}
	for i := range st.Regions {
		r := &st.Regions[i]
		if !lowers {
			r.Percent += delta[i]
			continue
		}
		r.Target = r.Percent + delta[i]
		if delta[i] < 0 {
			r.Percent, r.Lowered = r.Target, true
		}
	}
	if !lowers {
		return Result{State: st, Kind: Raised, Why: why}
	}
	st.Changing, st.Since = true, now
	return Result{State: st, Kind: Lowered, Why: why}
}

// balance trims the moves so that what the growing regions gain is what
// the shrinking ones give plus slack (the points the shares in force
// leave unused), never more: the sum stays at most 100.
func balance(delta []int32, slack int32) {
	var up, down int32
	for _, d := range delta {
		if d > 0 {
			up += d
		} else {
			down -= d
		}
	}
	slack = max(0, slack)
	gain := min(up, down+slack)
	give := max(0, gain-slack)
	trim(delta, up-gain, 1)
	trim(delta, down-give, -1)
}

// trim takes n points off the moves of sign sign, one at a time from the
// largest move (the first of equals).
func trim(delta []int32, n, sign int32) {
	for ; n > 0; n-- {
		best := -1
		for i, d := range delta {
			if d*sign > 0 && (best < 0 || d*sign > delta[best]*sign) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		delta[best] -= sign
	}
}

// targets is the split the demand asks for: unreachable regions and
// regions silent for less than SilentAfter keep their shares, regions
// silent for longer go to their floors, and the others share the rest in
// proportion to their demand, above their floors.
func targets(c *Config, st *State, obs map[string]Observation, now time.Time) ([]int32, string) {
	out := make([]int32, len(st.Regions))
	rest := int32(100)
	var free []int
	var notes []string
	for i, r := range st.Regions {
		o, ok := obs[r.Name]
		switch {
		case !ok || !o.Reachable:
			out[i] = r.Percent
			notes = append(notes, r.Name+" unreachable (keeps its share)")
		case now.Sub(r.LastHeard) >= c.SilentAfter:
			out[i] = r.floor(c)
			notes = append(notes, fmt.Sprintf("%s silent since %s (decays to its floor)", r.Name, r.LastHeard.UTC().Format(time.RFC3339)))
		case !o.Heard || !r.Known:
			out[i] = r.Percent
		default:
			free = append(free, i)
			continue
		}
		rest -= out[i]
	}
	shareOut(c, st, free, max(0, rest), out)
	note := demandNote(st)
	if len(notes) > 0 {
		note += "; " + strings.Join(notes, "; ")
	}
	return out, note
}

// shareOut gives rest points to the free regions in proportion to their
// demand (their shares in force when none has any), each at least its
// floor, in whole points (largest remainders).
func shareOut(c *Config, st *State, free []int, rest int32, out []int32) {
	if len(free) == 0 {
		return
	}
	weight := make([]float64, len(free))
	floors := make([]float64, len(free))
	var total, floorSum float64
	for k, i := range free {
		weight[k] = st.Regions[i].Demand
		floors[k] = float64(st.Regions[i].floor(c))
		total += weight[k]
		floorSum += floors[k]
	}
	if total <= 0 {
		for k, i := range free {
			weight[k] = float64(st.Regions[i].Percent)
		}
	}
	if floorSum >= float64(rest) {
		// The floors alone take the rest (other regions hold more than
		// their floors): the rest in proportion to the floors.
		weight, floors = floors, make([]float64, len(free))
	}
	share := waterfill(float64(rest), weight, floors)
	whole := largestRemainder(share, rest)
	for k, i := range free {
		out[i] = whole[k]
	}
}

// waterfill splits total in proportion to weight, each part at least its
// floor: a part below its floor is pinned there and the others share what
// is left, until none is below.
func waterfill(total float64, weight, floor []float64) []float64 {
	share := make([]float64, len(weight))
	pinned := make([]bool, len(weight))
	for {
		left, w := total, 0.0
		for k := range weight {
			if pinned[k] {
				left -= floor[k]
			} else {
				w += weight[k]
			}
		}
		changed := false
		for k := range weight {
			if pinned[k] {
				share[k] = floor[k]
				continue
			}
			if w > 0 {
				share[k] = left * weight[k] / w
			} else {
				share[k] = left / float64(countFalse(pinned))
			}
			if share[k] < floor[k] {
				pinned[k], changed = true, true
			}
		}
		if !changed {
			return share
		}
	}
}

func countFalse(b []bool) int {
	n := 0
	for _, v := range b {
		if !v {
			n++
		}
	}
	return n
}

// largestRemainder rounds share down to whole points and gives the points
// left of total to the largest fractions (the first of equals).
func largestRemainder(share []float64, total int32) []int32 {
	out := make([]int32, len(share))
	order := make([]int, len(share))
	var sum int32
	for k, s := range share {
		out[k] = int32(math.Floor(s + 1e-9))
		sum += out[k]
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := share[order[a]]-math.Floor(share[order[a]]+1e-9), share[order[b]]-math.Floor(share[order[b]]+1e-9)
		return fa > fb
	})
	for j := 0; sum < total && len(order) > 0; j = (j + 1) % len(order) {
		out[order[j]]++
		sum++
	}
	return out
}

// demandNote is the regions' smoothed demand: "demand eu=12.5/s us=3/s".
func demandNote(st *State) string {
	parts := make([]string, 0, len(st.Regions))
	for _, r := range st.Regions {
		if r.Known {
			parts = append(parts, fmt.Sprintf("%s=%s/s", r.Name, FormatDemand(r.Demand)))
		} else {
			parts = append(parts, r.Name+"=?")
		}
	}
	return "demand " + strings.Join(parts, " ")
}

// FormatDemand writes a demand in tokens per second with at most one
// decimal ("12.5", "3").
func FormatDemand(d float64) string {
	return strconv.FormatFloat(math.Round(d*10)/10, 'f', -1, 64)
}

func abs(x int32) int32 {
	if x < 0 {
		return -x
	}
	return x
}

func allZero(d []int32) bool {
	for _, x := range d {
		if x != 0 {
			return false
		}
	}
	return true
}
