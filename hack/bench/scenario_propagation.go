package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

const (
	propNamespace = "tollgate-system" // snapshot ConfigMaps and Leases
	rulesNS       = "bench-rules"     // RateLimitRules
	propTenant    = "prop"
	propGateways  = 3
	propPoll      = 2 * time.Millisecond
)

// propCapacity0 is the rule's capacity before the first change; change i
// sets propCapacity0 + 10i.
const propCapacity0 = 1000

// scenarioPropagation (6): a RateLimitRule's capacity changes through the
// API server; how long until every gateway (three processes in Kubernetes
// mode, fed by `tollgate controller`) enforces the new capacity.
func (h *harness) scenarioPropagation(ctx context.Context) error {
	rig, stop, err := h.propagationRig(ctx)
	defer stop()
	if err != nil {
		return err
	}
	if err := waitEnforced(ctx, rig.c, rig.gws, propCapacity0, 30*time.Second); err != nil {
		return err
	}
	res := &PropagationResult{Gateways: propGateways, PollMs: ms(propPoll)}
	h.res.Propagation = res
	for i := 1; i <= h.plan.PropagationChanges; i++ {
		capacity := int64(propCapacity0 + 10*i)
		delay, err := rig.change(ctx, capacity)
		if err != nil {
			return err
		}
		res.DelaysMs = append(res.DelaysMs, ms(delay))
		h.logf("change %d/%d: capacity %d enforced by all %d gateways %.0fms after the API write", i, h.plan.PropagationChanges, capacity, propGateways, ms(delay))
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	sorted := append([]float64(nil), res.DelaysMs...)
	sort.Float64s(sorted)
	res.Changes = len(sorted)
	res.P50, res.P99, res.Max = quantileF(sorted, .5), quantileF(sorted, .99), sorted[len(sorted)-1]
	return nil
}

// propRig is what the propagation scenario changes and watches.
type propRig struct {
	k    *kubeEnv
	rule *v1alpha1.RateLimitRule
	gws  []*gatewayProc
	c    *http.Client
}

// propagationRig creates the namespaces and the rule, and starts Redis,
// the controller and the gateways. stop ends what was started, in reverse
// order; it is set on error too.
func (h *harness) propagationRig(ctx context.Context) (rig *propRig, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	k, err := h.kubeEnv(ctx)
	if err != nil {
		return nil, stop, err
	}
	for _, ns := range []string{propNamespace, rulesNS} {
		if err := k.namespace(ctx, ns); err != nil {
			return nil, stop, err
		}
	}
	rs, err := h.startRedis(ctx, "redis-propagation")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, rs.Kill)
	rig = &propRig{k: k, rule: &v1alpha1.RateLimitRule{
		ObjectMeta: metav1.ObjectMeta{Name: "propagation", Namespace: rulesNS},
		Spec:       v1alpha1.RateLimitRuleSpec{Tenant: propTenant, Route: "*", Capacity: propCapacity0, RefillPerSecond: ptr.To(int64(1_000_000))},
	}}
	if err := k.client.Create(ctx, rig.rule); err != nil {
		return nil, stop, fmt.Errorf("creating the RateLimitRule: %w", err)
	}
	ctrl, err := startProc("controller", filepath.Join(h.logDir, "controller.log"), h.bin, "controller",
		"--kubeconfig", k.kubeconfig, "--snapshot-namespace", propNamespace, "--leader-elect=false", "--namespace-policy=open",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-format", "json")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { ctrl.Stop(3 * time.Second) })
	for i := 1; i <= propGateways; i++ {
		g, err := h.startGateway(ctx, gatewaySpec{name: fmt.Sprintf("g%d", i), redisAddr: rs.Addr(), kubeconfig: k.kubeconfig, namespace: propNamespace})
		if err != nil {
			if ctrl.Exited() {
				return nil, stop, ctrl.exitError()
			}
			return nil, stop, err
		}
		stops = append(stops, g.stop)
		rig.gws = append(rig.gws, g)
	}
	rig.c = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return rig, stop, nil
}

// change sets the rule's capacity through the API server and returns how
// long after the write every gateway enforced it.
func (rig *propRig) change(ctx context.Context, capacity int64) (time.Duration, error) {
	old := rig.rule.DeepCopy()
	rig.rule.Spec.Capacity = capacity
	t0 := time.Now()
	if err := rig.k.client.Patch(ctx, rig.rule, client.MergeFrom(old)); err != nil {
		return 0, fmt.Errorf("changing the capacity: %w", err)
	}
	if err := waitEnforced(ctx, rig.c, rig.gws, capacity, 30*time.Second); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// waitEnforced polls every gateway until each answers with
// X-RateLimit-Limit: capacity.
func waitEnforced(ctx context.Context, c *http.Client, gws []*gatewayProc, capacity int64, within time.Duration) error {
	want := strconv.FormatInt(capacity, 10)
	var wg sync.WaitGroup
	errs := make([]error, len(gws))
	for i, g := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := ""
			err := waitFor(ctx, within, propPoll, fmt.Sprintf("%s to enforce capacity %d", g.name, capacity), func() (bool, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/bench", nil)
				req.Header.Set("X-Api-Key", propTenant)
				resp, err := c.Do(req)
				if err != nil {
					return false, nil
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				last = resp.Header.Get("X-RateLimit-Limit")
				return last == want, nil
			})
			if err != nil {
				errs[i] = fmt.Errorf("%w (its last X-RateLimit-Limit: %q)", err, last)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// quantileF of sorted values (nearest rank).
func quantileF(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
