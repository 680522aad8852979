package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
