package metrics

import "github.com/prometheus/client_golang/prometheus"

// HTTP2 are the metrics of the proxy's HTTP/2 connections (h2 on the HTTPS
// port, h2c with --h2c).
type HTTP2 struct {
	// Errors counts the HTTP/2 protocol errors of clients, by type: the
	// names Go's HTTP/2 server gives them (a fixed set, such as
	// conn_ENHANCE_YOUR_CALM_too_many_early_resets or over_max_streams).
	Errors *prometheus.CounterVec
	// ResetFloods counts the connections closed because their client reset
	// more streams than --h2-reset-rate allows.
	ResetFloods prometheus.Counter
}

// EarlyResets is the type Go's HTTP/2 server counts when a client resets
// streams faster than their handlers end (it closes the connection).
const EarlyResets = "conn_ENHANCE_YOUR_CALM_too_many_early_resets"

// NewHTTP2 creates the HTTP/2 metrics and registers them on reg.
func NewHTTP2(reg prometheus.Registerer) *HTTP2 {
	m := &HTTP2{
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_http2_errors_total",
			Help: "HTTP/2 protocol errors of clients, by type as Go's HTTP/2 server names them (conn_ENHANCE_YOUR_CALM_too_many_early_resets: streams reset faster than handlers end, the CVE-2023-44487 shape, the connection closed; over_max_streams; ...).",
		}, []string{"type"}),
		ResetFloods: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_gateway_http2_reset_floods_total",
			Help: "HTTP/2 connections the gateway closed because their client reset more streams than --h2-reset-rate allows (a rapid reset flood).",
		}),
	}
	// The rapid-reset refusal of Go's own server is there from the start,
	// at 0, so its dashboard panel and alert have a series before the
	// first flood.
	m.Errors.WithLabelValues(EarlyResets)
	reg.MustRegister(m.Errors, m.ResetFloods)
	return m
}
