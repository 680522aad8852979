package metrics

import "github.com/prometheus/client_golang/prometheus"

// Admin mutation actions and results, the labels of
// tollgate_gateway_admin_mutations_total.
const (
	ActionReset  = "reset"
	ActionForget = "forget"

	MutationOK       = "ok"
	MutationInvalid  = "invalid"  // 400: a bad parameter
	MutationDenied   = "denied"   // 401: no token, or a wrong one
	MutationDisabled = "disabled" // 403: no --admin-token-file
	MutationError    = "error"    // Redis failed
)

// Support holds the metrics of the support tools on the admin listener
// (POST /debug/reset, GET /debug/top). None carries a tenant.
type Support struct {
	// AdminMutations counts the admin listener's mutations by action
	// (reset, forget) and result (ok, invalid, denied, disabled, error).
	AdminMutations *prometheus.CounterVec
}

// NewSupport registers the support metrics on reg. refusedTenants is the
// number of distinct tenants refused in the top-K's window (a
// HyperLogLog's estimate), read at each scrape.
func NewSupport(reg prometheus.Registerer, refusedTenants func() float64) *Support {
	s := &Support{
		AdminMutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_admin_mutations_total",
			Help: "Mutations asked of the admin listener (POST /debug/reset and /debug/forget), by action and result (ok; invalid: a bad parameter; denied: no bearer token or a wrong one; disabled: no --admin-token-file; error: Redis failed).",
		}, []string{"action", "result"}),
	}
	refused := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tollgate_gateway_refused_tenants",
		Help: "Distinct tenants this gateway refused at least once in the window of /debug/top (--top-window; estimated, 1.6% standard error). A tenant refused on several gateways counts on each.",
	}, refusedTenants)
	reg.MustRegister(s.AdminMutations, refused)
	// Exported at 0 from the start, so that the first one shows as an
	// increase.
	for _, a := range []string{ActionReset, ActionForget} {
		for _, r := range []string{MutationOK, MutationInvalid, MutationDenied, MutationDisabled, MutationError} {
			s.AdminMutations.WithLabelValues(a, r)
		}
	}
	return s
}
