// Package ticker runs a function at a fixed interval until a context ends.
package ticker

import (
	"context"
	"time"
)

// Every calls f every d (not at once) until ctx ends.
func Every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}
