package gateway

import (
	"context"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/internal/lib/ticker"
)

// The admin listener (metrics, probes, pprof) and the gRPC health status.

// followHealth keeps the gRPC health status in step with Ready until ctx
// ends.
func (g *Gateway) followHealth(ctx context.Context) error {
	ticker.Every(ctx, 250*time.Millisecond, g.setHealth)
	return nil
}

// setHealth reports SERVING for the whole server ("") and the rate limit
// service when the gateway is Ready (a rule snapshot is loaded), else
// NOT_SERVING. After Shutdown the health server ignores it.
func (g *Gateway) setHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if g.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus("", st)
	g.health.SetServingStatus(rls.ServiceName, st)
}

// adminMux serves metrics, probes, /debug/explain (explain.go), the
// support tools /debug/top, /debug/reset and /debug/forget (support.go)
// and, opted in, pprof.
func (g *Gateway) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.Ready() {
			http.Error(w, "not ready: no rule snapshot loaded yet, or shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/debug/explain", g.explainHandler)
	mux.HandleFunc("/debug/top", g.topHandler)
	mux.HandleFunc("/debug/reset", g.resetHandler)
	mux.HandleFunc("/debug/forget", g.forgetHandler)
	if g.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
