// Package regions runs region shares that follow the traffic on real
// components: a kube-apiserver and etcd (envtest), a controller process
// with the region rebalancer, two regions each with its own redis-server
// and gateway processes (3 in eu, 2 in us), and a constant-rate client
// whose traffic moves between the regions. docs/regions.md says what it
// shows.
package regions

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/gobuild"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

const (
	namespace = "tollgate-system"
	capacity  = 100
	rate      = 10 // tokens per second
	interval  = time.Second
	confirm   = 5 * time.Second
)

// TestSharesFollowTraffic: capacity 100, rate 10/s, split 50/50; the
// traffic moves to 90/10. The shares converge to the traffic (lowering
// before raising, never over 100 in force), through a restart of the
// rebalancer mid-change (it resumes from status); a region cut off in the
// middle of the next change holds the growing region back until the
// confirmation bound; and across both regions the admitted requests never
// exceed capacity + rate x time in any window.
func TestSharesFollowTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an API server, two redis-servers, a controller and five gateways")
	}
	h, ctrl, eu, us, euRedis := setup(t)
	var l load
	l.setSplit(90)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { l.run(ctx, 40, eu, us) })
	seen := h.watch(ctx)

	// 1. The first change lowers us (the shrinking region) alone; the
	// rebalancer restarted right then resumes the change from status.
	h.eventually("the first change lowers us", func() bool {
		obj := h.get()
		return obj.Status.RegionChange != nil && shares(obj)["us"] < 50
	}, ctrl)
	if s := shares(h.get()); s["eu"] != 50 {
		t.Fatalf("first step %v: eu raised before us confirmed its lower share", s)
	}
	h.restart(ctrl)
	start := time.Now()
	h.eventually("the shares converge to 90/10", func() bool {
		obj := h.get()
		return obj.Status.RegionChange == nil && shares(obj)["eu"] >= 85
	}, ctrl)
	t.Logf("converged to %s in %.1f intervals after the restart", h.get().Status.RegionSplit, time.Since(start).Seconds()/interval.Seconds())

	// 2. The traffic moves back to 50/50: eu shrinks, and is cut off (its
	// Redis frozen) once lowered. us gets its share only after the bound.
	l.setSplit(50)
	var since time.Time
	h.eventually("eu lowered", func() bool {
		obj := h.get()
		if ch := obj.Status.RegionChange; ch != nil && shares(obj)["eu"] < 85 {
			since = ch.Since.Time
			return true
		}
		return false
	}, ctrl)
	cutFrom := time.Now()
	euRedis.Pause()
	h.eventually("us raised after the bound", func() bool { return h.get().Status.RegionChange == nil }, ctrl)
	cutTo := time.Now()
	euRedis.Resume()
	if waited := cutTo.Sub(since); waited < confirm {
		t.Errorf("us raised %v after eu was lowered, before the %v bound, while eu could not confirm", waited, confirm)
	}
	h.eventually("the event says eu did not confirm", func() bool {
		return strings.Contains(h.events(), "eu not confirmed within 5s")
	}, ctrl)
	time.Sleep(3 * interval)
	cancel()
	wg.Wait()

	checkSeen(t, seen())
	checkBound(t, &l, cutFrom, cutTo)
	t.Logf("events:\n%s", h.events())
}

// setup starts everything: envtest, the two regions' Redis, the upstream,
// the controller with the rebalancer, the gateways, and the rule.
func setup(t *testing.T) (h *harness, ctrl *proc, eu, us []*proc, euRedis *redistest.Server) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tollgate")
	if err := gobuild.Tollgate(envtestutil.RepoRoot(), bin); err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logr.Discard())
	env, cfg := envtestutil.Start(t)
	kubeconfig, err := envtestutil.WriteKubeconfig(env, dir)
	if err != nil {
		t.Fatal(err)
	}
	k8s := envtestutil.Client(t, cfg)
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	h = &harness{t: t, dir: dir, bin: bin, k8s: k8s, rule: client.ObjectKey{Namespace: "default", Name: "orders"}}
	euRedis, usRedis := redistest.Start(t), redistest.Start(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	t.Cleanup(upstream.Close)
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - id: orders\n    path: /orders\n    upstream: "+upstream.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := freeAddr(t)
	ctrl = h.start("controller", "http://"+probe+"/readyz", "controller", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
		"--leader-elect=false", "--namespace-policy", "open", "--metrics-bind-address", "0", "--health-probe-bind-address", probe,
		"--region-rebalance", "--region-redis", "eu="+euRedis.Addr()+",us="+usRedis.Addr(),
		"--region-interval", interval.String(), "--region-read-timeout", "300ms", "--region-confirm-within", confirm.String(),
		"--region-smoothing", "0.7", "--region-max-step", "20")
	rule := &v1alpha1.RateLimitRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orders"},
		Spec: v1alpha1.RateLimitRuleSpec{Tenant: "shop-a", Route: "orders", Capacity: capacity, RefillPerSecond: ptr.To(int64(rate)),
			Regions: []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}},
	}
	if err := k8s.Create(ctx, rule); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		eu = append(eu, h.gateway(fmt.Sprintf("eu-%d", i+1), "eu", euRedis.Addr(), kubeconfig, routes))
	}
	for i := range 2 {
		us = append(us, h.gateway(fmt.Sprintf("us-%d", i+1), "us", usRedis.Addr(), kubeconfig, routes))
	}
	for _, g := range append(append([]*proc(nil), eu...), us...) {
		h.eventually(g.Name+" enforces the rule", func() bool { return admits(g) }, g)
	}
	return h, ctrl, eu, us, euRedis
}

// gateway starts one gateway of region.
func (h *harness) gateway(name, region, redisAddr, kubeconfig, routes string) *proc {
	listen, admin := freeAddr(h.t), freeAddr(h.t)
	p := h.start(name, "http://"+admin+"/readyz", "gateway", "--kubeconfig", kubeconfig, "--snapshot-namespace", namespace,
		"--routes", routes, "--redis-addr", redisAddr, "--listen", listen, "--admin-listen", admin, "--identity", "header-is-tenant",
		// Each region's gateways count each other (its own release, in a
		// cluster): the fallback's 1/N is of the region's share.
		"--pod-name", name, "--membership-group", "gw-"+region, "--lease-duration", "3s", "--region", region, "--region-demand-window", "200ms", "--region-demand-slots", "20",
		// A deadline a loaded machine keeps: the count must come from
		// Redis, not from the local fallback, outside the cut-off.
		"--redis-timeout", "200ms", "--shutdown-grace", "1s")
	p.url = "http://" + listen
	return p
}

// admits reports whether g answers the rule's route with a limit header
// (the rule is loaded; its bucket says so).
func admits(g *proc) bool {
	req, _ := http.NewRequest(http.MethodGet, g.url+"/orders", nil)
	req.Header.Set("X-Api-Key", "shop-a")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.Header.Get("X-RateLimit-Limit") == "50"
}

// watch polls the rule's status until ctx ends and returns the splits in
// force it saw, in order.
func (h *harness) watch(ctx context.Context) func() []map[string]int32 {
	var mu sync.Mutex
	var seen []map[string]int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			var obj v1alpha1.RateLimitRule
			if h.k8s.Get(ctx, h.rule, &obj) == nil && obj.Status.RegionSplit != last {
				last = obj.Status.RegionSplit
				mu.Lock()
				seen = append(seen, shares(&obj))
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() []map[string]int32 {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// events is the notes of the rule's events, one a line.
func (h *harness) events() string {
	var evs eventsv1.EventList
	if err := h.k8s.List(context.Background(), &evs, client.InNamespace("default")); err != nil {
		h.t.Fatal(err)
	}
	var notes []string
	for _, e := range evs.Items {
		if e.Regarding.Name == h.rule.Name {
			notes = append(notes, e.Reason+": "+e.Note)
		}
	}
	return strings.Join(notes, "\n")
}

// checkSeen: the shares in force never added up to more than 100, and
// once moved never went back to the static split.
func checkSeen(t *testing.T, seen []map[string]int32) {
	t.Helper()
	moved := false
	for _, s := range seen {
		if sum := s["eu"] + s["us"]; sum > 100 {
			t.Errorf("shares in force %v add up to %d", s, sum)
		}
		if s["eu"] != 50 || s["us"] != 50 {
			moved = true
		} else if moved {
			t.Errorf("the shares went back to the static split 50/50: %v", seen)
		}
	}
	t.Logf("splits in force, in order: %v", seen)
}

// checkBound: in every window of T (for several T) the requests admitted
// across both regions are at most capacity + rate x (T + the latency of
// the window's requests), the bound docs/regions.md derives, outside the
// time eu was cut off (its gateways decided locally then, the fallback's
// own error: reported, not asserted).
func checkBound(t *testing.T, l *load, cutFrom, cutTo time.Time) {
	t.Helper()
	l.mu.Lock()
	t.Logf("%d requests sent (%v), %d admitted, %d errors", l.sent, l.perGateway, len(l.admitted), l.errs)
	l.mu.Unlock()
	for _, T := range []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, 30 * time.Second, time.Hour} {
		healthy := func(at time.Time) bool {
			return at.Add(T+time.Second).Before(cutFrom) || at.After(cutTo.Add(2*time.Second))
		}
		most, lat := l.worstWindow(T, healthy)
		span := min(T, l.duration()) // the whole run for T = 1h
		bound := float64(capacity) + rate*(span+lat).Seconds()
		t.Logf("window %v: at most %d admitted (bound %.1f, latency %v)", T, most, bound, lat.Round(time.Millisecond))
		if float64(most) > bound {
			t.Errorf("window %v: %d admitted across both regions, more than capacity + rate x (T + latency) = %.1f", T, most, bound)
		}
		all, _ := l.worstWindow(T, func(time.Time) bool { return true })
		t.Logf("window %v, the cut-off included: at most %d admitted", T, all)
	}
}
