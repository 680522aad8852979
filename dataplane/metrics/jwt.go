package metrics

import "github.com/prometheus/client_golang/prometheus"

// JWT are the metrics of bearer token identity (--identity=jwt).
type JWT struct {
	// Refused counts tokens refused, by reason (jwtauth.Reasons). It never
	// carries the token or a claim.
	Refused *prometheus.CounterVec
	// Keys is the number of verification keys in force.
	Keys prometheus.Gauge
	// KeysLoaded is the Unix time the keys in force were loaded.
	KeysLoaded prometheus.Gauge
}

// NewJWT creates the JWT metrics, every reason at 0, and registers them on
// reg.
func NewJWT(reg prometheus.Registerer, reasons []string) *JWT {
	m := &JWT{
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_jwt_refused_total",
			Help: "Bearer tokens refused (401 invalid_token), by reason: malformed, algorithm, unknown_key, signature, expired, not_yet_valid, issuer, audience, tenant.",
		}, []string{"reason"}),
		Keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_jwt_keys",
			Help: "Verification keys in force (0: every token is refused).",
		}),
		KeysLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_jwt_keys_loaded_timestamp_seconds",
			Help: "Unix time the verification keys in force were loaded; a failed fetch keeps them (see tollgate_gateway_reload_errors_total{source=\"jwks\"}).",
		}),
	}
	for _, r := range reasons {
		m.Refused.WithLabelValues(r)
	}
	reg.MustRegister(m.Refused, m.Keys, m.KeysLoaded)
	return m
}
