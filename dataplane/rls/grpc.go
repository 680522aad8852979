package rls

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// ServiceName is the gRPC service this package serves; the health service
// reports it too.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// maxRecvMsgSize bounds one request: 64 descriptors of 32 entries fit easily.
const maxRecvMsgSize = 1 << 20

// streamWorkers is the number of goroutines that serve calls and are kept
// between calls. A call decided in Redis runs deep enough to grow a fresh
// goroutine's stack several times, and copying stacks was a fifth of the
// service's CPU with a goroutine per call (the rls benchmark's profile);
// a kept goroutine's stack stays grown. Calls beyond this many in flight
// get a goroutine of their own, as without workers.
const streamWorkers = 64

// NewGRPCServer returns a gRPC server serving s and, when h is not nil, the
// standard health service (grpc.health.v1) for Kubernetes gRPC probes.
//
// Keepalive suits Envoy, which keeps one long-lived HTTP/2 connection per
// upstream host: clients may ping every 5s, also without calls in flight
// (Envoy's connection_keepalive); the server pings a connection idle for a
// minute and drops it if the ping is not answered in 20s. Connections are
// recycled after 10 minutes (a GOAWAY, with 30s for calls in flight), so
// clients spread over new gateway replicas after a scale-up.
func NewGRPCServer(s *Server, h *health.Server, extra ...grpc.ServerOption) *grpc.Server {
	gs := grpc.NewServer(append(ServerOptions(), extra...)...)
	rlsv3.RegisterRateLimitServiceServer(gs, s)
	if h != nil {
		healthgrpc.RegisterHealthServer(gs, h)
	}
	return gs
}

// ServerOptions are the gRPC server options NewGRPCServer uses (a bare
// server measured against the service takes them too).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  time.Minute,
			Timeout:               20 * time.Second,
			MaxConnectionAge:      10 * time.Minute,
			MaxConnectionAgeGrace: 30 * time.Second,
		}),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.NumStreamWorkers(streamWorkers),
	}
}
