package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/rls"
	"github.com/tollgate-dev/tollgate/hack/engineeval"
)

// floorFlag makes this program the rls scenario's floor instead of a
// benchmark run: `bench -serve-rls-floor ADDR` serves the rate limit service
// with a grpc-go server that answers every call with one constant OK, the
// least any rate limit service over grpc-go can cost. The scenario starts
// it as a process of its own, so its CPU is read from /proc like the
// gateway's.
const floorFlag = "-serve-rls-floor"

// proxyFloorFlag makes this program the latency scenario's HTTP floor:
// `bench -serve-proxy-floor ADDR UPSTREAM` serves a bare
// httputil.ReverseProxy to UPSTREAM with the gateway's transport settings
// and copy buffers, the least a Go net/http proxy costs.
const proxyFloorFlag = "-serve-proxy-floor"

// fastFloorFlag makes this program the latency scenario's fasthttp floor:
// `bench -serve-fasthttp-floor ADDR UPSTREAM` serves a bare reverse proxy
// on valyala/fasthttp (hack/engineeval) with the gateway's settings where
// they map: what the proxy would cost on that engine.
const fastFloorFlag = "-serve-fasthttp-floor"

// h2FloorFlag makes this program the http2 scenario's gRPC floor:
// `bench -serve-h2-floor ADDR UPSTREAM` serves a bare
// httputil.ReverseProxy to the h2c UPSTREAM over h2c (and HTTP/1.1), with
// the gateway's h2c transport and copy buffers: the least a Go net/http
// proxy costs for a gRPC call.
const h2FloorFlag = "-serve-h2-floor"

// floorMain serves a floor and reports true when the program was started
// as `-serve-rls-floor ADDR`, `-serve-proxy-floor ADDR UPSTREAM` or
// `-serve-fasthttp-floor ADDR UPSTREAM` or `-serve-h2-floor ADDR UPSTREAM`
// (by the benchmark, or by its test binary).
func floorMain() bool {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == floorFlag:
		err = serveRLSFloor(os.Args[2])
	case len(os.Args) == 4 && os.Args[1] == proxyFloorFlag:
		err = serveProxyFloor(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == fastFloorFlag:
		err = serveFastFloor(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == h2FloorFlag:
		err = serveH2Floor(os.Args[2], os.Args[3])
	default:
		return false
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: floor:", err)
		os.Exit(1)
	}
	return true
}

// serveProxyFloor serves a bare reverse proxy to upstream on addr until the
// process is killed, with the gateway's transport and copy buffers.
func serveProxyFloor(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = proxy.NewTransport(30 * time.Second)
	rp.BufferPool = proxy.NewBufferPool()
	srv := &http.Server{Addr: addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// serveH2Floor serves a bare reverse proxy to the h2c upstream on addr,
// over h2c with prior knowledge (as gRPC clients speak it) and HTTP/1.1,
// until the process is killed; the gateway's h2c transport and buffers.
func serveH2Floor(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = proxy.NewH2CTransport(30 * time.Second)
	rp.BufferPool = proxy.NewBufferPool()
	srv := &http.Server{Addr: addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv.ListenAndServe()
}

// serveFastFloor serves the bare fasthttp proxy to upstream on addr until
// the process is killed, with the gateway's response timeout.
func serveFastFloor(addr, upstream string) error {
	p, err := engineeval.NewFastProxy(upstream, 30*time.Second)
	if err != nil {
		return err
	}
	return p.ListenAndServe(addr)
}

// floorServer answers every ShouldRateLimit with the same response.
type floorServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	res *rlsv3.RateLimitResponse
}

func (f *floorServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return f.res, nil
}

// serveRLSFloor serves the floor on addr until the process is killed, with
// the service's gRPC server options (keepalive, kept stream workers).
func serveRLSFloor(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer(rls.ServerOptions()...)
	rlsv3.RegisterRateLimitServiceServer(s, &floorServer{res: &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}},
	}})
	healthpb.RegisterHealthServer(s, health.NewServer()) // SERVING
	return s.Serve(lis)
}

// rlsFloor starts the floor of the rls scenario: a grpc-go server that
// does nothing but answer (this harness, floorFlag).
func (h *harness) rlsFloor(ctx context.Context) (*rlsTarget, error) {
	p, addr, err := h.startFloor("rls-floor", floorFlag)
	if err != nil {
		return nil, err
	}
	client, closeConn, err := rlsClient(ctx, addr)
	if err != nil {
		p.Kill()
		return nil, err
	}
	return &rlsTarget{name: "floor", client: client, pid: p.Pid(), close: func() { closeConn(); p.Kill() }}, nil
}

// startFloor starts this harness as the floor of flag (then its address,
// then args) on the measured CPU, its log in name.log; it returns the
// process and the loopback address it serves.
func (h *harness) startFloor(name, flag string, args ...string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin, argv := h.pin.command(self, append([]string{flag, addr}, args...)...)
	p, err := startProc(name, filepath.Join(h.logDir, name+".log"), bin, argv...)
	if err != nil {
		return nil, "", err
	}
	return p, addr, nil
}
