// Package cmd wires tollgate's subcommands: flags, logging and signals. The
// logic lives in the controllers and dataplane packages.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Execute runs the tollgate command line and returns the exit code. Run
// as kubectl-tollgate (krew's convention: a copy or a symlink of that name
// on PATH), it answers kubectl tollgate ...
func Execute(args []string) int {
	root := newRoot(progName(os.Args[0]))
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintln(os.Stderr, root.DisplayName()+":", err)
		}
		return 1
	}
	return 0
}

// errSilent is returned by commands that already reported their failure.
var errSilent = errors.New("failed")

// progName is how the command was called: "kubectl tollgate" when the
// binary's name is kubectl-tollgate (a kubectl plugin), else "tollgate".
func progName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if base == "kubectl-tollgate" {
		return "kubectl tollgate"
	}
	return "tollgate"
}

func newRoot(prog string) *cobra.Command {
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "Distributed rate limiter for API gateways",
		Long: `tollgate limits requests per tenant (X-Api-Key) and route with token buckets
shared by every gateway replica through Redis.

  tollgate demo         run a local demo (Redis, upstream, gateway, sample rules)
  tollgate gateway      proxy HTTP to upstreams and enforce the limits (data plane)
  tollgate controller   compile RateLimitRules into the rule snapshot (runs in Kubernetes)
  tollgate explain      show what decides a tenant's requests on a route (asks a gateway)
  tollgate top          show the tenants refused most right now (asks every gateway)
  tollgate reset        set a tenant's bucket or quota to full or to N tokens (authenticated)
  tollgate version      print the version, commit, Go version and snapshot formats

Named kubectl-tollgate on PATH, the same binary is a kubectl plugin:
kubectl tollgate explain|top|reset find the gateways through the current
kubeconfig.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if prog != "tollgate" {
		// Help and errors name the command as the user typed it.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: prog}
	}
	root.AddCommand(newDemoCommand(), newGatewayCommand(), newControllerCommand(), newExplainCommand(prog),
		newTopCommand(prog), newResetCommand(prog), newVersionCommand())
	return root
}
