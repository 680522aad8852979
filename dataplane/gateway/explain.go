package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
)

// explainHandler serves GET /debug/explain?tenant=T&route=R on the admin
// listener: what decides tenant's requests on route, read without taking a
// token (package explain). It takes a tenant id, never an API key.
func (g *Gateway) explainHandler(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) { writeJSON(w, status, v) }
	if !onlyMethod(w, r, http.MethodGet) {
		return
	}
	q := r.URL.Query()
	for name := range q {
		if name != "tenant" && name != "route" && name != "address" {
			// The value is not echoed: it could be a key.
			reply(http.StatusBadRequest, map[string]string{"error": name + ": unknown parameter; want tenant, route and optionally address (explain takes a tenant id, never an API key)"})
			return
		}
	}
	tenant, route := q.Get("tenant"), q.Get("route")
	if err := explain.ValidateQuery(tenant, route); err != nil {
		reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var addr netip.Addr
	if a := q.Get("address"); a != "" {
		var err error
		if addr, err = netip.ParseAddr(a); err != nil {
			reply(http.StatusBadRequest, map[string]string{"error": "address: not an IP address"})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	src := explain.Source{
		Engine: g.engine, Chain: g.chain, Replicas: g.members.Replicas(),
		ReplicasCounted: gaugeValue(g.metrics.ReplicasCounted.Write) == 1, Clock: g.opts.Clock,
	}
	if g.redis != nil {
		src.Redis = g.redis
	}
	src.Snapshot = g.store.Current()
	if g.routes != nil {
		src.RouteKnown = func(id string) bool {
			for _, rt := range g.routes.Current().Routes() {
				if rt.ID == id {
					return true
				}
			}
			return false
		}
	}
	reply(http.StatusOK, explain.BuildFrom(ctx, src, tenant, route, addr.Unmap()))
}

// gaugeValue reads a gauge through its Write method.
func gaugeValue(write func(*dto.Metric) error) float64 {
	var m dto.Metric
	if write(&m) != nil || m.Gauge == nil {
		return 0
	}
	return m.Gauge.GetValue()
}
