package membership

import "context"

// Counter reports how many gateway replicas share the limits.
type Counter interface {
	// Replicas is the number of replicas, at least 1. It is cheap and safe
	// for concurrent use.
	Replicas() int
	// Run keeps the count current until ctx ends (a Static counter has
	// nothing to do and just waits).
	Run(ctx context.Context) error
}

// Static returns a Counter that always reports n (at least 1), for
// standalone gateways that are told their replica count.
func Static(n int) Counter { return static(max(n, 1)) }

type static int

func (s static) Replicas() int { return int(s) }

func (static) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
