package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/controllers"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// The shifted-load rule: capacity 200, 100/s, split 50/50; its load is
// 100 req/s, 90 in eu and 10 in us.
const (
	regionsCapacity = 200
	regionsRate     = 100
	regionsEU       = 90
	regionsUS       = 10
)

// scenarioRegions (12): region shares that follow the traffic. A load
// that moved to 90/10 against a 50/50 split, served under the static split
// and with the rebalancer (in this process, rewriting the rules file the
// two regions' gateways poll); and what recording demand costs a
// decision: two gateways of one region on one Redis, one recording and
// one not (--region-demand-window 0), driven in turn.
func (h *harness) scenarioRegions(ctx context.Context) error {
	res := &RegionsResult{Rule: fmt.Sprintf("*/*: capacity %d, %d/s, regions eu 50 %%, us 50 %%", regionsCapacity, regionsRate)}
	h.res.Regions = res
	for _, adaptive := range []bool{false, true} {
		run, err := h.regionsShift(ctx, adaptive)
		if err != nil {
			return err
		}
		res.Shift = append(res.Shift, *run)
		h.logf("regions %-8s served %d of %d (%.1f/s; eu %d, us %d), split at the end %s", run.Mode, run.Served, run.Sent, run.PerSecond, run.ServedEU, run.ServedUS, run.Split)
	}
	if s := res.Shift[0].Served; s > 0 {
		res.ServedRatio = round(float64(res.Shift[1].Served)/float64(s), 2)
	}
	var err error
	if res.Overhead, err = h.regionsOverhead(ctx); err != nil {
		return err
	}
	on, off := res.Overhead[0], res.Overhead[1]
	if off.CPUPerDecision > 0 {
		res.CPURatio = round(on.CPUPerDecision/off.CPUPerDecision, 3)
	}
	if off.RedisCPUPerDecision > 0 {
		res.RedisCPURatio = round(on.RedisCPUPerDecision/off.RedisCPUPerDecision, 3)
	}
	return nil
}

// regionsRule is the shifted-load rule, Fixed or following the traffic.
func regionsRule(adaptive bool, capacity, perSecond int64) *v1alpha1.RateLimitRule {
	r := &v1alpha1.RateLimitRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RateLimitRule"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "regions"},
		Spec: v1alpha1.RateLimitRuleSpec{Tenant: "*", Route: "*", Capacity: capacity, RefillPerSecond: ptr.To(perSecond),
			Regions: []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}},
	}
	if !adaptive {
		r.Spec.RegionSplit = v1alpha1.RegionSplitFixed
	}
	return r
}

// regionsShift runs the shifted load on two regions, each a Redis and a
// gateway, for RegionsShiftDur.
func (h *harness) regionsShift(ctx context.Context, adaptive bool) (*RegionsShiftRun, error) {
	mode := map[bool]string{false: "static", true: "adaptive"}[adaptive]
	store := &fileRules{path: filepath.Join(h.logDir, "regions-"+mode+".yaml")}
	if err := store.write(regionsRule(adaptive, regionsCapacity, regionsRate)); err != nil {
		return nil, err
	}
	gws := map[string]*gatewayProc{}
	clients := map[string]redis.UniversalClient{}
	for _, region := range []string{"eu", "us"} {
		rs, err := h.startRedis(ctx, "regions-"+mode+"-"+region)
		if err != nil {
			return nil, err
		}
		defer rs.Kill()
		rc := rs.client()
		defer rc.Close()
		clients[region] = rc
		gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-regions-" + mode + "-" + region, rulesFile: store.path, redisAddr: rs.Addr(),
			extra: []string{"--region", region, "--region-demand-window", "250ms", "--region-demand-slots", "20"}})
		if err != nil {
			return nil, err
		}
		defer gw.stop()
		gws[region] = gw
	}
	if adaptive {
		defer startRebalancer(ctx, store, clients)()
	}
	var wg sync.WaitGroup
	results := map[string]*loadResult{}
	var mu sync.Mutex
	var loadErr error
	for region, rate := range map[string]int{"eu": regionsEU, "us": regionsUS} {
		wg.Go(func() {
			r, err := h.load(ctx, loadSpec{name: "regions-" + mode + "-" + region, url: gws[region].url + "/bench", rate: rate, dur: h.plan.RegionsShiftDur, mix: oneTenant("shop-a")})
			mu.Lock()
			defer mu.Unlock()
			results[region], loadErr = r, errors.Join(loadErr, err)
		})
	}
	wg.Wait()
	if loadErr != nil {
		return nil, loadErr
	}
	run := &RegionsShiftRun{Mode: mode, Seconds: h.plan.RegionsShiftDur.Seconds(),
		ServedEU: results["eu"].Codes["200"], ServedUS: results["us"].Codes["200"]}
	run.Sent = results["eu"].Sent + results["us"].Sent
	run.Served = run.ServedEU + run.ServedUS
	run.PerSecond = round(float64(run.Served)/run.Seconds, 1)
	if obj, err := store.read(); err == nil {
		run.Split = obj.Status.RegionSplit
		if run.Split == "" {
			run.Split = "eu=50 us=50 (spec)"
		}
	}
	return run, nil
}

// startRebalancer runs a region rebalancer on store and clients (every
// 1 s, step 20, smoothing 0.7, confirmation bound 3 s) until the function
// it returns is called.
func startRebalancer(ctx context.Context, store controllers.RuleStore, clients map[string]redis.UniversalClient) (stop func()) {
	rb := controllers.NewRebalancer(controllers.RebalancerConfig{Store: store, Regions: clients, Log: logr.Discard(),
		Options: controllers.RegionOptions{Enabled: true, Interval: time.Second, ReadTimeout: time.Second,
			Shares: regionshares.Config{MaxStep: 20, Smoothing: 0.7, ConfirmWithin: 3 * time.Second}}})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rb.Start(rctx) }()
	return func() { cancel(); <-done }
}

// regionsOverhead measures decisions with and without demand recording:
// two gateways of region eu on one Redis, a rule that never refuses, the
// same load on each in turn for RegionsRounds rounds.
func (h *harness) regionsOverhead(ctx context.Context) ([]RegionsCostRun, error) {
	rs, err := h.startRedis(ctx, "regions-cost")
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	rc := rs.client()
	defer rc.Close()
	store := &fileRules{path: filepath.Join(h.logDir, "regions-cost.yaml")}
	if err := store.write(regionsRule(true, 1_000_000, 1_000_000)); err != nil {
		return nil, err
	}
	modes := []struct {
		name   string
		window string
	}{{"recording demand", "250ms"}, {"not recording", "0s"}}
	out := make([]RegionsCostRun, len(modes))
	gws := make([]*gatewayProc, len(modes))
	for i, m := range modes {
		out[i].Mode = m.name
		gw, err := h.startGateway(ctx, gatewaySpec{name: fmt.Sprintf("gw-regions-cost-%d", i), rulesFile: store.path, redisAddr: rs.Addr(),
			extra: []string{"--region", "eu", "--region-demand-window", m.window}})
		if err != nil {
			return nil, err
		}
		defer gw.stop()
		gws[i] = gw
		if _, err := h.load(ctx, loadSpec{name: "warm-up", url: gw.url + "/bench", rate: h.plan.RegionsRate, dur: h.plan.Warmup, mix: oneTenant("shop-a")}); err != nil {
			return nil, err
		}
	}
	for round := 0; round < h.plan.RegionsRounds; round++ {
		for i, m := range modes {
			r, err := h.redisCostRun(ctx, gws[i], rc, rs.Pid(), loadSpec{name: "regions-cost", url: gws[i].url + "/bench", rate: h.plan.RegionsRate, dur: h.plan.CostDur, mix: oneTenant("shop-a")})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			out[i].add(r)
		}
	}
	for i := range out {
		h.logf("regions %-16s %.4f round trips/decision, %.4f script calls/decision (Redis), gateway %.1f µs CPU/decision, redis-server %.1f µs",
			out[i].Mode, out[i].RoundTripsPerDec, out[i].ServerCallsPerDec, out[i].CPUPerDecision, out[i].RedisCPUPerDecision)
	}
	return out, nil
}

// add folds one run into c: decision-weighted means.
func (c *RegionsCostRun) add(r *RedisCostRun) {
	n := c.Decisions + r.Decisions
	if n <= 0 {
		return
	}
	mean := func(a, b float64) float64 { return (a*c.Decisions + b*r.Decisions) / n }
	c.RoundTripsPerDec = round(mean(c.RoundTripsPerDec, r.RoundTripsPerDec), 4)
	c.ServerCallsPerDec = round(mean(c.ServerCallsPerDec, r.ServerCallsPerDec), 4)
	c.CPUPerDecision = round(mean(c.CPUPerDecision, r.CPUPerDecision), 1)
	c.RedisCPUPerDecision = round(mean(c.RedisCPUPerDecision, r.RedisCPUPerDecision), 1)
	c.Decisions = n
}

// fileRules is the rebalancer's RuleStore on a manifest file that the
// gateways poll: the rule with its status, rewritten whole (a rename, so a
// gateway never reads half a file).
type fileRules struct {
	mu   sync.Mutex
	path string
}

func (f *fileRules) read() (*v1alpha1.RateLimitRule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, err
	}
	var obj v1alpha1.RateLimitRule
	return &obj, yaml.Unmarshal(b, &obj)
}

func (f *fileRules) write(obj *v1alpha1.RateLimitRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

func (f *fileRules) List(context.Context) ([]v1alpha1.RateLimitRule, error) {
	obj, err := f.read()
	if err != nil {
		return nil, err
	}
	return []v1alpha1.RateLimitRule{*obj}, nil
}

func (f *fileRules) WriteStatus(_ context.Context, obj, _ *v1alpha1.RateLimitRule) error {
	return f.write(obj)
}
