package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// SOSteady is one chain (one gateway's limiter) on one redis-server at a
// steady rate: round trips and CPU per decision, and the CPU profile.
type SOSteady struct {
	Rate int `json:"rate"`
	// Workers: every call through the Batcher's workers (NoSolo), the
	// design before solo sends; else the gateway's defaults.
	Workers          bool    `json:"workersOnly,omitempty"`
	SoloPerDec       float64 `json:"soloSendsPerDecision"`
	Seconds          float64 `json:"seconds"`
	Decisions        int64   `json:"decisions"`
	RoundTripsPerDec float64 `json:"roundTripsPerDecision"`
	CallsPerDec      float64 `json:"scriptCallsPerDecision"`
	// CPUPerDec is this process's CPU per decision, µs: the chain, the
	// decision engine, the pacing and a goroutine per decision.
	CPUPerDec float64 `json:"cpuUsPerDecision"`
	// RedisCPUPerDec is redis-server's, µs.
	RedisCPUPerDec float64  `json:"redisCpuUsPerDecision"`
	Profile        string   `json:"profile"`
	Top            []string `json:"top"` // heaviest functions, flat
	// Cum are the cumulative shares of the limiter's main stages.
	Cum []string `json:"cumulative"`
}

// steadyStages are the functions whose cumulative share the steady rows
// show: the decision, the Batcher's workers and their writes and reads.
var steadyStages = []string{
	"github.com/tollgate-dev/tollgate/dataplane/decision.(*Engine).DecideRule",
	"github.com/tollgate-dev/tollgate/dataplane/limiter.(*worker).run",
	"github.com/tollgate-dev/tollgate/dataplane/limiter.(*Batcher).takeSolo",
	"internal/poll.(*FD).Write",
	"internal/poll.(*FD).Read",
	"runtime.gcBgMarkWorker",
	"runtime.findRunnable",
}

// soSteady runs one chain on a redis-server of its own at rate (tenants of
// the Redis cost scenario's mix, a bucket too large to refuse), with a CPU
// profile of this process; workers: with every call through the Batcher's
// workers (no solo sends), the baseline.
func (h *harness) soSteady(ctx context.Context, rate int, workers bool) (*SOSteady, error) {
	rs, err := h.startRedis(ctx, fmt.Sprintf("redis-steady-%d-%v", rate, workers))
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	if h.pin.ok() {
		_ = setAffinity(rs.Pid(), h.pin.rest)
	}
	o := redisconf.Options{Addrs: []string{rs.Addr()}, Mode: redisconf.ModeStandalone, PoolSize: 64, DialTimeout: 2 * time.Second}
	client, err := o.NewClient()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	chain := limiter.NewChain(limiter.ChainOptions{Client: client, Coalesce: true, EmptyBucketCache: true, NoSolo: workers})
	defer chain.Close()
	rule := &oneRule{snapshot.Rule{Tenant: "*", Route: "*", Capacity: 20000, RefillTokens: 10000, RefillPeriodMs: 1000}}
	e := decision.New(decision.Options{Rules: rule, Limiter: chain})
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	warm, stop := context.WithTimeout(ctx, h.plan.Warmup)
	steadyLoad(ctx, warm, e, rate, mix)
	stop()

	s := &SOSteady{Rate: rate, Workers: workers, Profile: fmt.Sprintf("profile-steady-%d.pb.gz", rate)}
	if workers {
		s.Profile = fmt.Sprintf("profile-steady-%d-workers.pb.gz", rate)
	}
	rt0, cmd0, _ := chain.Stats()
	solo0 := chain.SoloSends()
	cpu0, _ := cpuTime(os.Getpid())
	rcpu0, _ := cpuTime(rs.Pid())
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return nil, err
	}
	t0 := time.Now()
	running, stop := context.WithTimeout(ctx, h.plan.SteadyDur)
	n := steadyLoad(ctx, running, e, rate, mix)
	stop()
	pprof.StopCPUProfile()
	s.Seconds = round(time.Since(t0).Seconds(), 2)
	cpu1, _ := cpuTime(os.Getpid())
	rcpu1, _ := cpuTime(rs.Pid())
	rt1, cmd1, _ := chain.Stats()
	s.Decisions = n
	s.SoloPerDec = ratio4(float64(chain.SoloSends()-solo0), float64(n))
	s.RoundTripsPerDec, s.CallsPerDec = ratio4(float64(rt1-rt0), float64(n)), ratio4(float64(cmd1-cmd0), float64(n))
	s.CPUPerDec, s.RedisCPUPerDec = cpuPer(cpu1-cpu0, float64(n)), cpuPer(rcpu1-rcpu0, float64(n))
	if err := h.steadyProfile(ctx, s, prof.Bytes()); err != nil {
		h.logf("steady %d/s: no profile: %v", rate, err)
	}
	h.logf("steady %d/s on one chain%s: %d decisions, %.3f round trips, %.3f script calls and %.3f solo sends per decision, %.1f µs CPU per decision (redis-server %.1f µs)",
		rate, map[bool]string{true: " (workers only)"}[workers], n, s.RoundTripsPerDec, s.CallsPerDec, s.SoloPerDec, s.CPUPerDec, s.RedisCPUPerDec)
	return s, nil
}

// steadyProfile writes the profile and reads its heaviest functions and
// the stages' shares.
func (h *harness) steadyProfile(ctx context.Context, s *SOSteady, data []byte) error {
	file := filepath.Join(h.out, s.Profile)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	var err error
	if s.Top, err = flatTop(ctx, file, 15); err != nil {
		return err
	}
	cum, err := pprofTop(ctx, file, true, 800)
	if err != nil {
		return err
	}
	for _, f := range steadyStages {
		for _, l := range cum {
			if l.name == f {
				s.Cum = append(s.Cum, fmt.Sprintf("%s %.1f%%", shortFunc(f), l.cumPct))
			}
		}
	}
	return nil
}

// steadyLoad offers rate decisions/s to e until running ends (open loop,
// a goroutine per decision, at most 256 at once) and returns how many it
// made.
func steadyLoad(ctx, running context.Context, e *decision.Engine, rate int, mix tenantMix) int64 {
	l := &soLoad{}
	l.run(ctx, running, []*decision.Engine{e}, rate, func() (int, string) { return 0, mix.next() })
	return l.n.Load()
}
