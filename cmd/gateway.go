package cmd

import (
	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/version"
)

func newGatewayCommand() *cobra.Command {
	var (
		log  logOptions
		opts gateway.Options
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Proxy HTTP traffic to upstreams and enforce the rate limits",
		Long: `Run a gateway replica: an HTTP reverse proxy that limits every request by
tenant (the X-Api-Key header) and route with a token bucket in Redis shared
by all replicas.

Per request: match a route from --routes (404 if none) → tenant of the
X-Api-Key value in --api-keys-file (401 if missing or unknown, 400 if
malformed; an address with too many failures gets 429; --identity=
header-is-tenant takes the value as the tenant, for trusted networks only)
→ the rule for tenant and route (exact, tenant+*, *+route, *+*, else the
built-in default) → one atomic Redis
script call → forward upstream, or 429 with Retry-After. Every limited
response carries X-RateLimit-Limit and X-RateLimit-Remaining.

Rules come from the controller's snapshot ConfigMaps (in Kubernetes), or
with --rules from RateLimitRule manifest files (standalone). Both reload live.

When Redis is slow or down, a circuit breaker opens after --breaker-failures
failures and each rule's failureMode decides: LocalFallback (default) limits
locally with 1/N of the rule, N being the live replica count (Leases in
Kubernetes, --replicas standalone); FailOpen admits; FailClosed answers 503.

Example (standalone):
  tollgate gateway --routes routes.yaml --api-keys-file keys.yaml --rules config/samples/ --redis-addr 127.0.0.1:6379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := log.logger()
			if err != nil {
				return err
			}
			useRedisLogger(logger)
			logger.Info("starting gateway", version.Get().KeysAndValues()...)
			gw, err := gateway.New(opts, logger)
			if err != nil {
				return err
			}
			return gw.Run(cmd.Context())
		},
	}
	log.AddFlags(cmd.Flags())
	opts.AddFlags(cmd.Flags())
	return cmd
}
