package cmd

import (
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/cmd/demo"
)

func newDemoCommand() *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local demo: Redis, an echo upstream and a gateway with the sample rules",
		Long: `Run tollgate locally without Kubernetes and show what it does.

Starts a redis-server on a free port (or uses --redis-addr; without
redis-server installed it falls back to the in-process limiter), an echo
upstream, and a gateway in standalone mode with the RateLimitRules of
config/samples/. Then it sends a burst from several tenants, edits a rule
while the gateway runs (capacity 2: three requests answer 200, 200, 429 with
an exact Retry-After), and kills Redis to show the local fallback. Prints a
summary and stops everything it started. Exits non-zero if a step did not
behave as expected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			useRedisLogger(logr.Discard())
			return demo.Run(cmd.Context(), opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}
