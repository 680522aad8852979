// Package cmd wires tollgate's subcommands: flags, logging and signals. The
// logic lives in the controllers and dataplane packages.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Execute runs the tollgate command line and returns the exit code.
func Execute(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintln(os.Stderr, "tollgate:", err)
		}
		return 1
	}
	return 0
}

// errSilent is returned by commands that already reported their failure.
var errSilent = errors.New("failed")

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "Distributed rate limiter for API gateways",
		Long: `tollgate limits requests per tenant (X-Api-Key) and route with token buckets
shared by every gateway replica through Redis.

  tollgate demo         run a local demo (Redis, upstream, gateway, sample rules)
  tollgate gateway      proxy HTTP to upstreams and enforce the limits (data plane)
  tollgate controller   compile RateLimitRules into the rule snapshot (runs in Kubernetes)
  tollgate explain      show what decides a tenant's requests on a route (asks a gateway)
  tollgate version      print the version, commit, Go version and snapshot formats`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCommand(), newGatewayCommand(), newControllerCommand(), newExplainCommand(), newVersionCommand())
	return root
}
