package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rlsRoots split a rate limit service profile by who spends the CPU: the
// gRPC request goroutines deciding (mapping, the decision engine, the cache
// and the wait for Redis), the batcher's pipeline workers (go-redis and the
// socket), gRPC's own transport (HTTP/2 framing, protobuf), the Go scheduler
// looking for work (goroutine hand-offs) and the garbage collector.
var rlsRoots = []struct{ name, fn string }{
	{"ShouldRateLimit", "github.com/tollgate-dev/tollgate/dataplane/rls.(*Server).ShouldRateLimit"},
	{"batcher workers", "github.com/tollgate-dev/tollgate/dataplane/limiter.(*worker).run"},
	{"gRPC transport reader", "google.golang.org/grpc/internal/transport.(*http2Server).HandleStreams"},
	{"gRPC transport writer", "google.golang.org/grpc/internal/transport.(*loopyWriter).run"},
	{"scheduler", "runtime.schedule"},
	{"GC", "runtime.gcBgMarkWorker"},
}

// RLSProfile is a CPU profile of the rate limit service under the
// scenario's load.
type RLSProfile struct {
	File  string   `json:"file"`
	Roots []string `json:"roots"` // cumulative share of each of rlsRoots
	Top   []string `json:"top"`   // heaviest functions, flat
}

// rlsProfile takes a CPU profile of gw (its --pprof endpoint) while the
// callers drive it, after the measured run so that profiling does not
// weigh on the figures.
func (h *harness) rlsProfile(ctx context.Context, gw *gatewayProc, client rlsv3.RateLimitServiceClient, mode string) (*RLSProfile, error) {
	secs := max(1, int(h.plan.ProfileDur.Seconds()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.driveRLS(ctx, client, time.Duration(secs)*time.Second+time.Second, 0)
	}()
	defer func() { <-done }()
	if err := sleep(ctx, 300*time.Millisecond); err != nil {
		return nil, err
	}
	data, err := gw.cpuProfile(ctx, secs)
	if err != nil {
		return nil, err
	}
	p := &RLSProfile{File: "profile-rls-" + mode + ".pb.gz"}
	file := filepath.Join(h.out, p.File)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return nil, err
	}
	cum, err := pprofTop(ctx, file, true, 2000)
	if err != nil {
		return nil, err
	}
	for _, r := range rlsRoots {
		for _, l := range cum {
			if l.name == r.fn {
				p.Roots = append(p.Roots, fmt.Sprintf("%s %.1f%%", r.name, l.cumPct))
			}
		}
	}
	if p.Top, err = flatTop(ctx, file, 15); err != nil {
		return nil, err
	}
	return p, nil
}
