package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// memRules is a RuleStore in memory: what the API server keeps of the
// rules, status included.
type memRules struct {
	mu    sync.Mutex
	items []v1alpha1.RateLimitRule
}

func (m *memRules) List(context.Context) ([]v1alpha1.RateLimitRule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]v1alpha1.RateLimitRule, len(m.items))
	for i := range m.items {
		m.items[i].DeepCopyInto(&out[i])
	}
	return out, nil
}

func (m *memRules) WriteStatus(_ context.Context, obj, _ *v1alpha1.RateLimitRule) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.items {
		if m.items[i].Name == obj.Name && m.items[i].Namespace == obj.Namespace {
			// Through JSON's precision, as the API server keeps it.
			obj.Status.DeepCopyInto(&m.items[i].Status)
			if ch := m.items[i].Status.RegionChange; ch != nil {
				ch.Since = metav1.NewMicroTime(ch.Since.Truncate(time.Microsecond))
			}
		}
	}
	return nil
}

func (m *memRules) shares() (map[string]int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int32{}
	for _, s := range m.items[0].Status.Regions {
		out[s.Name] = s.Percent
	}
	if len(out) == 0 {
		for _, g := range m.items[0].Spec.Regions {
			out[g.Name] = g.Percent
		}
	}
	return out, m.items[0].Status.RegionChange != nil
}

func splitRule() v1alpha1.RateLimitRule {
	rate := int64(10)
	return v1alpha1.RateLimitRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Spec: v1alpha1.RateLimitRuleSpec{Tenant: "shop-a", Route: "orders", Capacity: 100, RefillPerSecond: &rate,
			Regions: []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}},
	}
}

// asks records demand in region's Redis as a gateway would: n requests of
// one token at the share in force.
func asks(t *testing.T, rc *redis.Client, region string, percent int32, n int) {
	t.Helper()
	if err := asksFor(rc, "ns/r", region, percent, n); err != nil {
		t.Fatal(err)
	}
}

// asksFor is asks for the rule src, with its error returned (it runs in
// goroutines too).
func asksFor(rc *redis.Client, src, region string, percent int32, n int) error {
	key := limiter.RegionKey("shop-a", "orders", region)
	b := limiter.Bucket{Key: key, Capacity: float64(percent), RefillTokens: 10 * int64(percent), RefillPeriodMs: 100_000,
		Demand: limiter.Demand{Key: limiter.DemandKey(key, src, region), WindowMs: 50, Slots: 40, Percent: int64(percent)}}
	r := limiter.NewRedis(rc)
	for i := 0; i < n; i++ {
		if _, err := r.Take(context.Background(), b, 1, 1); err != nil {
			return err
		}
	}
	return nil
}

// TestRebalancerFollowsDemand: two regions' Redis, demand 90/10; each pass
// of the rebalancer moves the shares towards it in two steps (lowered
// first, raised once the lowered region's gateways decided under the
// lower share), never above 100 in total; a rebalancer restarted
// mid-change resumes from status; an unreachable region keeps its share.
func TestRebalancerFollowsDemand(t *testing.T) {
	eu, us := redistest.Start(t), redistest.Start(t)
	rcs := map[string]*redis.Client{"eu": eu.Client(t), "us": us.Client(t)}
	store := &memRules{items: []v1alpha1.RateLimitRule{splitRule()}}
	opts := RegionOptions{Enabled: true, Interval: 400 * time.Millisecond,
		Shares: regionshares.Config{Floor: 5, MaxStep: 20, Smoothing: 1, Hysteresis: 3, ConfirmWithin: time.Hour}}
	newRB := func() *Rebalancer {
		return NewRebalancer(RebalancerConfig{Store: store, Options: opts, Log: logr.Discard(),
			Regions: map[string]redis.UniversalClient{"eu": rcs["eu"], "us": rcs["us"]}})
	}
	rb := newRB()
	ctx := context.Background()
	traffic := func() {
		shares, _ := store.shares()
		// Over more than the interval, so that complete windows hold it.
		for end := time.Now().Add(opts.Interval + 100*time.Millisecond); time.Now().Before(end); {
			asks(t, rcs["eu"], "eu", shares["eu"], 9)
			asks(t, rcs["us"], "us", shares["us"], 1)
			time.Sleep(10 * time.Millisecond)
		}
	}
	var history []map[string]int32
	for pass := 0; pass < 8; pass++ {
		traffic()
		if pass == 3 {
			rb = newRB() // a restart: nothing but status carries over
		}
		if err := rb.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		shares, changing := store.shares()
		history = append(history, shares)
		if sum := shares["eu"] + shares["us"]; sum > 100 {
			t.Fatalf("pass %d: shares in force %v add up to %d", pass, shares, sum)
		}
		if pass == 0 && (shares["us"] != 30 || shares["eu"] != 50 || !changing) {
			t.Fatalf("first pass: %v (changing %v), want us lowered to 30 first, eu still 50", shares, changing)
		}
		if pass == 3 && shares["eu"] < 50 {
			t.Fatalf("after the restart: %v, went back towards the static split", history)
		}
	}
	if s, changing := store.shares(); s["eu"] < 87 || changing {
		t.Fatalf("after 8 passes: %v (changing %v), want eu at 87 or more; history %v", s, changing, history)
	}
	// us's Redis gone: its share stays, and eu cannot grow past it.
	before, _ := store.shares()
	us.Kill()
	for pass := 0; pass < 2; pass++ {
		asks(t, rcs["eu"], "eu", before["eu"], 50)
		if err := rb.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := store.shares(); after["us"] != before["us"] {
		t.Fatalf("unreachable us: %v → %v, want its share kept", before, after)
	}
}

// TestReadRegionInACluster: in a Redis Cluster each bucket slot has its
// own ring (the tenant's); a pass reads every master's and adds up the
// rule's rings.
func TestReadRegionInACluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cc := c.Client(t)
	r := limiter.NewRedis(cc)
	ctx := context.Background()
	tenants := []string{"a", "b", "c", "d", "e", "f"}
	for _, tenant := range tenants {
		key := limiter.RegionKey(tenant, "orders", "eu")
		b := limiter.Bucket{Key: key, Capacity: 1000, RefillTokens: 1000, RefillPeriodMs: 1000,
			Demand: limiter.Demand{Key: limiter.DemandKey(key, "ns/r", "eu"), WindowMs: 200, Slots: 8, Percent: 50}}
		for range 5 {
			if _, err := r.Take(ctx, b, 1, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Windows of 200 ms: after two more, every window holding a take is
	// complete, and the pass counts it.
	time.Sleep(450 * time.Millisecond)
	var asked float64
	var mu sync.Mutex // the masters are scanned concurrently
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return scanRings(ctx, m, func(key string, fields map[string]string) {
			ring, err := regionshares.ParseRing(fields)
			if err != nil {
				t.Errorf("%s: %v", key, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, w := range ring.Windows {
				asked += w.Admitted + w.Refused
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if asked != float64(5*len(tenants)) {
		t.Fatalf("the rings of every master hold %v tokens, want %d", asked, 5*len(tenants))
	}
	readings, err := readRegion(ctx, cc, "eu", time.Minute, nil)
	if err != nil || readings["ns/r"] == nil || readings["ns/r"].Rings != len(tenants) {
		t.Fatalf("readRegion: %+v %v, want the rule's %d rings", readings, err, len(tenants))
	}
	if got := readings["ns/r"]; got.Asked != float64(5*len(tenants)) || got.Span <= 0 {
		t.Fatalf("readRegion: %+v, want the %d tokens asked over a span of complete windows", got, 5*len(tenants))
	}
}

// TestRegionOptions: the flags' checks name the flag; the password comes
// from the file, else the environment.
func TestRegionOptions(t *testing.T) {
	ok := RegionOptions{Enabled: true, Redis: map[string]string{"eu": "h:1"}, Interval: time.Second,
		Shares: regionshares.Config{Floor: 5, MaxStep: 20, Smoothing: 0.5, Hysteresis: 3}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mutate func(*RegionOptions)
		want   string
	}{
		{func(o *RegionOptions) { o.Redis = nil }, "--region-redis"},
		{func(o *RegionOptions) { o.Interval = time.Millisecond }, "--region-interval"},
		{func(o *RegionOptions) { o.Shares.Floor = 60 }, "--region-floor"},
		{func(o *RegionOptions) { o.Shares.MaxStep = 0 }, "--region-max-step"},
		{func(o *RegionOptions) { o.Shares.Smoothing = 1.5 }, "--region-smoothing"},
		{func(o *RegionOptions) { o.Shares.Hysteresis = 0 }, "--region-hysteresis"},
		{func(o *RegionOptions) { o.Mode = "sentinel" }, "--region-redis-mode"},
		{func(o *RegionOptions) { o.TLSCAFile = "ca.crt" }, "--region-redis-tls"},
	} {
		o := ok
		c.mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to name %s", err, c.want)
		}
	}
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := ok
	o.PasswordFile = file
	if p, err := o.password(); err != nil || p != "s3cret" {
		t.Fatalf("password from the file: %q %v", p, err)
	}
	t.Setenv(RegionPasswordEnv, "from-env")
	o.PasswordFile = ""
	if p, err := o.password(); err != nil || p != "from-env" {
		t.Fatalf("password from the environment: %q %v", p, err)
	}
}
