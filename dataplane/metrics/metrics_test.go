package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/version"
)

func TestDecisionCounters(t *testing.T) {
	g := NewGateway(prometheus.NewRegistry())
	names := []string{"redis", "local"}
	d := g.DecisionCounters("orders", len(names), func(i int) string { return names[i] })
	d.Inc(Allowed, 0)
	d.Inc(Allowed, 0)
	d.Inc(Rejected, 1)
	d.Inc(ShadowRejected, 1)
	d.Inc(Rejected, 2)  // out of range: not counted
	d.Inc(Rejected, -1) // likewise
	for _, c := range []struct {
		result, source string
		want           float64
	}{
		{ResultAllowed, "redis", 2},
		{ResultRejected, "local", 1},
		{ResultShadowRejected, "local", 1},
		{ResultRejected, "redis", 0},
	} {
		if got := testutil.ToFloat64(g.Decisions.WithLabelValues("orders", c.result, c.source)); got != c.want {
			t.Errorf("%s/%s = %v, want %v", c.result, c.source, got, c.want)
		}
	}
	var none *Gateway
	none.DecisionCounters("x", 1, func(int) string { return "redis" }).Inc(Allowed, 0) // nil: no panic
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewGateway(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := version.Get()
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 ||
			labels["version"] != v.Version || labels["commit"] != v.Commit || labels["goversion"] != v.GoVersion {
			t.Errorf("tollgate_build_info = %v", mf.GetMetric())
		}
		return
	}
	t.Error("no tollgate_build_info")
}

func TestRedisWaits(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGateway(reg)
	waits := int64(3)
	g.RegisterRedisWaits(func() int64 { return waits })
	waits = 7 // read at scrape time
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_gateway_redis_waits_total" {
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != 7 {
				t.Errorf("tollgate_gateway_redis_waits_total = %v, want 7", got)
			}
			return
		}
	}
	t.Error("tollgate_gateway_redis_waits_total not exported")
}

func TestObserveStacked(t *testing.T) {
	g := NewGateway(prometheus.NewRegistry())
	for _, oneCall := range []bool{true, true, false} {
		g.ObserveStacked(oneCall)
	}
	if one, inOrder := testutil.ToFloat64(g.Stacked.WithLabelValues(StackOneCall)), testutil.ToFloat64(g.Stacked.WithLabelValues(StackInOrder)); one != 2 || inOrder != 1 {
		t.Errorf("one_call %v, in_order %v: want 2 and 1", one, inOrder)
	}
	var none *Gateway
	none.ObserveStacked(true) // nil: no panic
}
