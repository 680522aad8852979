package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
)

// ScaleOutResult is the scale-out scenario's.
type ScaleOutResult struct {
	Mix      string     `json:"mix"`
	Rule     string     `json:"rule"`
	Gateways int        `json:"gateways"`
	Passes   []SOPass   `json:"passes"`
	Ops      *SOOps     `json:"operations,omitempty"`
	Steady   []SOSteady `json:"steady,omitempty"`
	Note     string     `json:"note"`
}

// SOPass is one load on one cluster.
type SOPass struct {
	Name    string  `json:"name"`
	Round   int     `json:"round"`
	Masters int     `json:"masters"`
	Shards  bool    `json:"shards"`
	Rate    int     `json:"rate"`
	Seconds float64 `json:"seconds"`
	// Decisions, admitted and the exact count (an exact token bucket per
	// tenant over the same decisions); Error is admitted/exact - 1.
	Decisions int64   `json:"decisions"`
	Admitted  int64   `json:"admitted"`
	Exact     int64   `json:"exact"`
	Error     float64 `json:"error"`
	// The hot tenant alone.
	HotAdmitted int64   `json:"hotAdmitted"`
	HotExact    int64   `json:"hotExact"`
	HotError    float64 `json:"hotError"`
	// Local: decided off Redis (the failure mode).
	Local int64 `json:"localDecisions"`
	// Per decision, from the chains' counters (Chain.Stats).
	RoundTripsPerDec  float64 `json:"roundTripsPerDecision"`
	ScriptCallsPerDec float64 `json:"scriptCallsPerDecision"`
	// GatewayCPUPerDec is this process's CPU (every chain, the load
	// generator and the recording) per decision, µs.
	GatewayCPUPerDec float64 `json:"gatewayCpuUsPerDecision"`
	// Redis: every master's CPU (INFO cpu) per 1,000 decisions, seconds,
	// and decisions per Redis CPU-second.
	RedisCPUSeconds   float64    `json:"redisCpuSeconds"`
	RedisCPUPer1000   float64    `json:"redisCpuSecondsPer1000Decisions"`
	DecPerRedisCPUSec float64    `json:"decisionsPerRedisCpuSecond"`
	MaxMeanCPU        float64    `json:"maxOverMeanMasterCpu"`
	MaxMeanCalls      float64    `json:"maxOverMeanMasterScriptCalls"`
	BytesPerBucket    float64    `json:"redisBytesPerBucket"`
	MastersDetail     []SOMaster `json:"mastersDetail"`
	// HotMaster is the address of the master holding the hot tenant's
	// (unsharded) bucket; empty with shards.
	HotMaster string `json:"hotMaster,omitempty"`
}

// SOMaster is one master's share of a pass.
type SOMaster struct {
	Addr        string  `json:"addr"`
	Slots       int     `json:"slots"`
	Decisions   float64 `json:"decisions"` // attributed by the keys' slots
	CommandsPS  float64 `json:"commandsPerSecond"`
	ScriptCalls int64   `json:"scriptCalls"`
	CallsPerDec float64 `json:"scriptCallsPerDecision"`
	CPUSeconds  float64 `json:"cpuSeconds"`
	CPUPer1000  float64 `json:"cpuSecondsPer1000Decisions"`
	Busy        float64 `json:"cpuBusy"` // CPU seconds per second
	Keys        int64   `json:"keys"`
	BytesPerBkt float64 `json:"bytesPerBucket"`
}

// scenarioScaleOut runs the passes, the operations and the steady rates.
func (h *harness) scenarioScaleOut(ctx context.Context) error {
	p := h.plan
	res := &ScaleOutResult{Mix: newSOMix(h.cfg.seed, p.ScaleOutTenants).describe(), Rule: newSORules(p.ScaleOutRate, true).describe(),
		Gateways: p.ScaleOutGateways,
		Note: "gateways: limiter chains in the harness process (limiter.NewChain under decision.Engine, each with a cluster client built by redisconf as --redis-mode=cluster builds it); " +
			"deadlines 1 s (a loaded machine must not turn late answers into local decisions), the operations pass with the gateway's defaults; " + h.pin.describe()}
	h.res.ScaleOut = res
	restore, err := h.pinHarness()
	if err != nil {
		return err
	}
	defer restore()
	for _, x := range soPasses(p) {
		pass, err := h.soPass(ctx, x.masters, x.shards, x.rate)
		if err != nil {
			return fmt.Errorf("%d masters: %w", x.masters, err)
		}
		pass.Round = x.round
		res.Passes = append(res.Passes, *pass)
	}
	if res.Ops, err = h.soOperations(ctx); err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	for _, rate := range p.SteadyRates {
		for _, workers := range []bool{false, true} {
			s, err := h.soSteady(ctx, rate, workers)
			if err != nil {
				return fmt.Errorf("steady %d/s: %w", rate, err)
			}
			res.Steady = append(res.Steady, *s)
		}
	}
	return nil
}

// pinHarness moves this process onto the measured CPU (the chains are the
// measured gateways here) and returns the function that moves it back.
func (h *harness) pinHarness() (func(), error) {
	if !h.pin.ok() {
		return func() {}, nil
	}
	if err := setAffinity(os.Getpid(), h.pin.measured); err != nil {
		return nil, err
	}
	return func() { _ = setAffinity(os.Getpid(), h.pin.all) }, nil
}

// soPassSpec is one pass's cluster and load.
type soPassSpec struct {
	masters int
	shards  bool
	rate    int
	round   int
}

// soPasses are the passes in order: in each round, the rate on the small
// and the large cluster, then the small one at the rate that loads each of
// its masters as the large cluster's are loaded at the full rate; after
// the rounds, the small one without shards. The scaling efficiency pools
// the rounds (interleaved, so that a change in the machine's speed falls
// on every kind of pass alike).
func soPasses(p plan) []soPassSpec {
	small, large, rate := p.ScaleOutMasters[0], p.ScaleOutMasters[1], p.ScaleOutRate
	var out []soPassSpec
	for r := 1; r <= max(1, p.ScaleOutRounds); r++ {
		out = append(out, soPassSpec{small, true, rate, r}, soPassSpec{large, true, rate, r}, soPassSpec{small, true, rate * small / large, r})
	}
	return append(out, soPassSpec{small, false, rate, 1})
}

// soScaling is the scaling comparison of the passes: decisions per Redis
// CPU-second pooled over the rounds on the large cluster at the rate
// (big), on the small one at the rate that loads each master alike
// (same) and at the rate (whole); rounds is how many passes each pools.
type soScaling struct {
	big, same, whole float64
	rounds           int
	rate, sameRate   int
	small, large     int
}

// soScalingOf compares the passes ps of plan p; ok is false when a kind of
// pass is missing.
func soScalingOf(p plan, ps []SOPass) (soScaling, bool) {
	s := soScaling{small: p.ScaleOutMasters[0], large: p.ScaleOutMasters[1], rate: p.ScaleOutRate}
	s.sameRate = s.rate * s.small / s.large
	s.big, s.rounds = soPooled(ps, s.large, s.rate)
	s.same, _ = soPooled(ps, s.small, s.sameRate)
	s.whole, _ = soPooled(ps, s.small, s.rate)
	return s, s.big > 0 && s.same > 0 && s.whole > 0
}

// soPooled is decisions per Redis CPU-second over every pass of masters
// at rate with shards (every round), and how many passes there were.
func soPooled(passes []SOPass, masters, rate int) (float64, int) {
	var decs, cpu float64
	n := 0
	for _, p := range passes {
		if p.Masters == masters && p.Rate == rate && p.Shards {
			decs, cpu, n = decs+float64(p.Decisions), cpu+p.RedisCPUSeconds, n+1
		}
	}
	if cpu == 0 {
		return 0, n
	}
	return decs / cpu, n
}

// soPass runs the load at rate on a fresh cluster of masters.
func (h *harness) soPass(ctx context.Context, masters int, shards bool, rate int) (*SOPass, error) {
	p := h.plan
	name := fmt.Sprintf("%d masters", masters)
	if !shards {
		name += ", no shards"
	}
	if rate != p.ScaleOutRate {
		name += fmt.Sprintf(", %d/s", rate)
	}
	c, err := h.soCluster(fmt.Sprintf("scaleout-%d-%v", masters, shards), masters, 0)
	if err != nil {
		return nil, err
	}
	defer c.Kill()
	rules := newSORules(rate, shards)
	// At a fraction of the rate every tenant gets that fraction of its
	// traffic and of its rule: the same share of it is refused.
	rules.scaleDefault(float64(rate) / float64(p.ScaleOutRate))
	gws, err := startSOGateways(ctx, c.Addrs(), p.ScaleOutGateways, rules, time.Second, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer gws.close()
	if err := soWarmUp(ctx, gws); err != nil {
		return nil, err
	}
	before, err := readMasters(ctx, c)
	if err != nil {
		return nil, err
	}
	rt0, cmd0, _ := gws.stats()
	cpu0, _ := cpuTime(os.Getpid())
	load := newSOLoad(rate, p.ScaleOutDur)
	running, stop := context.WithTimeout(ctx, p.ScaleOutDur)
	load.run(ctx, running, gws.engines, rate, newSOMix(h.cfg.seed, p.ScaleOutTenants).pick)
	stop()
	secs := time.Since(load.start).Seconds()
	cpu1, _ := cpuTime(os.Getpid())
	rt1, cmd1, _ := gws.stats()
	after, err := readMasters(ctx, c)
	if err != nil {
		return nil, err
	}
	pass := &SOPass{Name: name, Masters: masters, Shards: shards, Rate: rate, Seconds: round(secs, 2)}
	decs := load.decisions()
	pass.score(decs, rules)
	pass.RoundTripsPerDec = ratio4(float64(rt1-rt0), float64(pass.Decisions))
	pass.ScriptCallsPerDec = ratio4(float64(cmd1-cmd0), float64(pass.Decisions))
	pass.GatewayCPUPerDec = cpuPer(cpu1-cpu0, float64(pass.Decisions))
	if err := h.soMasters(ctx, c, pass, decs, rules, before, after); err != nil {
		return nil, err
	}
	h.logf("scale-out %s: %d decisions in %.1fs, admitted %d vs exact %d (%+.2f %%; hot tenant %+.2f %%), %.3f round trips and %.3f script calls per decision, gateway %.1f µs, Redis %.3f CPU-s per 1000 decisions, max/mean master CPU %.2f",
		name, pass.Decisions, secs, pass.Admitted, pass.Exact, 100*pass.Error, 100*pass.HotError, pass.RoundTripsPerDec, pass.ScriptCallsPerDec, pass.GatewayCPUPerDec, pass.RedisCPUPer1000, pass.MaxMeanCPU)
	return pass, nil
}

// soWarmUp opens connections and loads the script on every master: each
// chain decides for a spread of tenants on another route.
func soWarmUp(ctx context.Context, gws *soGateways) error {
	for _, e := range gws.engines {
		for i := range 64 {
			if _, _, err := e.Decide(ctx, soTenant(i*997), "warm", 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// score sets the accuracy figures of decs.
func (p *SOPass) score(decs []soDecision, rules *soRules) {
	exact := exactCount(decs, rules)
	p.Decisions = int64(len(decs))
	for _, d := range decs {
		if d.allowed {
			p.Admitted++
			if d.tenant == 0 {
				p.HotAdmitted++
			}
		}
		if d.local {
			p.Local++
		}
	}
	for t, n := range exact {
		p.Exact += n
		if t == 0 {
			p.HotExact = n
		}
	}
	p.Error = relErr(p.Admitted, p.Exact)
	p.HotError = relErr(p.HotAdmitted, p.HotExact)
}

func relErr(got, want int64) float64 {
	if want == 0 {
		return 0
	}
	return round(float64(got)/float64(want)-1, 4)
}

// soMasters fills the per-master figures of a pass from INFO before and
// after, the decisions attributed to each master by their keys' slots.
func (h *harness) soMasters(ctx context.Context, c *cluster.Cluster, p *SOPass, decs []soDecision, rules *soRules,
	before, after map[string]nodeInfo) error {
	cc := c.Client()
	defer cc.Close()
	own, err := owners(ctx, cc, h.plan.ScaleOutTenants, rules)
	if err != nil {
		return err
	}
	perMaster := map[string]float64{}
	for _, d := range decs {
		for addr, w := range own[d.tenant] {
			perMaster[addr] += w
		}
	}
	if !p.Shards {
		for addr := range own[0] {
			p.HotMaster = addr
		}
	}
	ms, err := c.Masters()
	if err != nil {
		return err
	}
	var cpu, calls []float64
	var mem, keys int64
	for _, m := range ms {
		b, a := before[m.Addr], after[m.Addr]
		x := SOMaster{Addr: m.Addr, Slots: len(m.Slots), Decisions: math.Round(perMaster[m.Addr]), ScriptCalls: a.scripts - b.scripts,
			CommandsPS: round(float64(a.commands-b.commands)/p.Seconds, 0), CPUSeconds: round(a.cpu-b.cpu, 3), Keys: a.keys}
		x.CallsPerDec = ratio4(float64(x.ScriptCalls), x.Decisions)
		x.CPUPer1000 = ratio4(1000*x.CPUSeconds, x.Decisions)
		x.Busy = round(x.CPUSeconds/p.Seconds, 3)
		// Buckets expire during the load (the default rule's after 4 s),
		// so the figure is the dataset at the end over the keys then.
		x.BytesPerBkt = round(float64(a.memory)/math.Max(1, float64(a.keys)), 1)
		mem, keys = mem+a.memory, keys+a.keys
		cpu, calls = append(cpu, x.CPUSeconds), append(calls, float64(x.ScriptCalls))
		p.MastersDetail = append(p.MastersDetail, x)
	}
	total := sum(cpu)
	p.RedisCPUSeconds = round(total, 3)
	p.RedisCPUPer1000 = ratio4(1000*total, float64(p.Decisions))
	p.DecPerRedisCPUSec = round(float64(p.Decisions)/math.Max(total, 1e-9), 0)
	p.MaxMeanCPU, p.MaxMeanCalls = maxOverMean(cpu), maxOverMean(calls)
	p.BytesPerBucket = round(float64(mem)/math.Max(1, float64(keys)), 1)
	return nil
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func maxOverMean(xs []float64) float64 {
	if len(xs) == 0 || sum(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return round(s[len(s)-1]/(sum(xs)/float64(len(xs))), 3)
}
