package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// HTTP2Result is scenario 11: the gateway's CPU per request over h2c
// against HTTP/1.1 on the same route, and per gRPC unary call against a
// bare h2 reverse proxy, each measured process alone on the measured CPU.
type HTTP2Result struct {
	Rate int        `json:"rate"`
	Mix  string     `json:"mix"`
	Rule string     `json:"rule"`
	Rows []HTTP2Run `json:"rows"`
}

// HTTP2Run is one row: a protocol through one process at the rate.
type HTTP2Run struct {
	Name          string  `json:"name"`
	About         string  `json:"about"`
	P50           float64 `json:"p50Ms"`
	P99           float64 `json:"p99Ms"`
	Sent          int     `json:"sent"`
	Bad           int     `json:"bad"`
	CPUPerRequest float64 `json:"cpuMicrosPerRequest"`
	// Baseline is the row this one is compared with ("" for a baseline),
	// VsBaseline the ratio of their CPU per request.
	Baseline   string  `json:"baseline,omitempty"`
	VsBaseline float64 `json:"cpuVsBaseline,omitempty"`
}

// http2Routes route /bench to the echo upstream (%[1]s) and the gRPC
// health service to the h2c backend (%[2]s).
const http2Routes = `routes:
  - {id: bench, pathPrefix: /bench, upstream: %[1]s}
  - {id: grpc, methods: [POST], pathPrefix: /grpc.health.v1.Health, upstream: 'h2c://%[2]s'}
`

// scenarioHTTP2 (11): one gateway with --h2c, pinned; the same rule and
// route over HTTP/1.1 and over h2c (one connection, multiplexed), then
// gRPC unary calls (grpc.health.v1.Health/Check to a grpc-go server)
// through the gateway and through a bare h2 reverse proxy, the floor.
func (h *harness) scenarioHTTP2(ctx context.Context) error {
	rs, err := h.startRedis(ctx, "redis-http2")
	if err != nil {
		return err
	}
	defer rs.Kill()
	backend, stopBackend, err := grpcHealthBackend()
	if err != nil {
		return err
	}
	defer stopBackend()
	restore, err := h.pin.pinSelf()
	if err != nil {
		return err
	}
	defer restore()
	if h.pin.ok() {
		if err := setAffinity(rs.Pid(), h.pin.rest); err != nil {
			return err
		}
		defer func() { _ = setAffinity(rs.Pid(), h.pin.all) }()
	}
	rule := generousRule(false)
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	res := &HTTP2Result{Rate: h.plan.HTTP2Rate, Mix: mix.describe(), Rule: rule.String()}
	h.res.HTTP2 = res
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-http2", rules: manifests(rule), redisAddr: rs.Addr(), pin: true,
		extra: []string{"--h2c"}, routes: fmt.Sprintf(http2Routes, h.upstream, backend)})
	if err != nil {
		return err
	}
	defer gw.stop()
	if err := h.http2HTTPRows(ctx, res, gw, mix); err != nil {
		return err
	}
	return h.http2GRPCRows(ctx, res, gw, backend, mix)
}

// http2HTTPRows measures /bench through gw over HTTP/1.1, then over h2c.
func (h *harness) http2HTTPRows(ctx context.Context, res *HTTP2Result, gw *gatewayProc, mix tenantMix) error {
	h2c := h2cLoadClient()
	defer h2c.CloseIdleConnections()
	for _, p := range []struct {
		name, about string
		client      *http.Client
	}{
		{"HTTP/1.1", "GET /bench, keep-alive connections as the load needs them", nil},
		{"h2c", "GET /bench over one HTTP/2 connection (prior knowledge), streams multiplexed", h2c},
	} {
		spec := loadSpec{name: p.name, url: gw.url + "/bench", rate: res.Rate, dur: h.plan.Warmup, mix: mix, client: p.client}
		if _, err := h.load(ctx, spec); err != nil {
			return err
		}
		spec.dur = h.plan.HTTP2Dur
		r, d, err := h.loadOn(ctx, gw, spec)
		if err != nil {
			return err
		}
		row := HTTP2Run{Name: p.name, About: p.about, P50: r.P50, P99: r.P99, Sent: r.Sent, Bad: r.Bad, CPUPerRequest: cpuPer(d.cpu, float64(r.Sent))}
		if len(res.Rows) > 0 {
			row.Baseline = res.Rows[0].Name
		}
		res.addRow(h, row, r.FirstErr)
	}
	return nil
}

// http2GRPCRows measures gRPC unary calls through the h2 floor, then
// through gw.
func (h *harness) http2GRPCRows(ctx context.Context, res *HTTP2Result, gw *gatewayProc, backend string, mix tenantMix) error {
	floor, err := h.startH2Floor(ctx, backend)
	if err != nil {
		return err
	}
	r, cpu, err := h.grpcMeasured(ctx, floor.addr, floor.Pid(), "h2 floor", mix)
	floor.Kill()
	if err != nil {
		return fmt.Errorf("h2 floor: %w", err)
	}
	res.addRow(h, HTTP2Run{Name: "gRPC unary, h2 floor", About: "a bare httputil.ReverseProxy over h2c both ways (no limiter)",
		P50: r.P50, P99: r.P99, Sent: r.Sent, Bad: r.Bad, CPUPerRequest: cpuPer(cpu, float64(r.Sent))}, r.FirstErr)
	r, cpu, err = h.grpcMeasured(ctx, gw.url[len("http://"):], gw.Pid(), "gateway", mix)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	res.addRow(h, HTTP2Run{Name: "gRPC unary, gateway", About: "the same calls through the gateway: route, identity (x-api-key metadata), one Redis decision",
		P50: r.P50, P99: r.P99, Sent: r.Sent, Bad: r.Bad, CPUPerRequest: cpuPer(cpu, float64(r.Sent)), Baseline: "gRPC unary, h2 floor"}, r.FirstErr)
	return nil
}

// addRow appends row with its ratio to its baseline, and logs it.
func (res *HTTP2Result) addRow(h *harness, row HTTP2Run, firstErr string) {
	for _, b := range res.Rows {
		if b.Name == row.Baseline && b.CPUPerRequest > 0 {
			row.VsBaseline = round(row.CPUPerRequest/b.CPUPerRequest, 2)
		}
	}
	res.Rows = append(res.Rows, row)
	vs := "baseline"
	if row.Baseline != "" {
		vs = fmt.Sprintf("%.2fx %s", row.VsBaseline, row.Baseline)
	}
	h.logf("%-21s at %d/s: p50 %.3f p99 %.3f ms, %.1f µs CPU/request (%s), bad %d of %d %s",
		row.Name, res.Rate, row.P50, row.P99, row.CPUPerRequest, vs, row.Bad, row.Sent, firstErr)
}

// grpcMeasured warms the target up, then loads it for the scenario's
// duration and returns the result and the CPU process pid spent meanwhile.
func (h *harness) grpcMeasured(ctx context.Context, addr string, pid int, name string, mix tenantMix) (*loadResult, time.Duration, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, 0, err
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	if _, err := grpcLoad(ctx, c, name, h.plan.HTTP2Rate, h.plan.Warmup, mix); err != nil {
		return nil, 0, err
	}
	cpu0, _ := cpuTime(pid)
	r, err := grpcLoad(ctx, c, name, h.plan.HTTP2Rate, h.plan.HTTP2Dur, mix)
	cpu1, _ := cpuTime(pid)
	return r, cpu1 - cpu0, err
}

// grpcLoad calls Check at rate for dur, open loop (a call is sent on time
// however long the earlier ones take, at most 2,000 at once), each as a
// tenant of mix in the x-api-key metadata. OK counts as 200,
// RESOURCE_EXHAUSTED as 429, anything else as bad.
func grpcLoad(ctx context.Context, c healthpb.HealthClient, name string, rate int, dur time.Duration, mix tenantMix) (*loadResult, error) {
	n := int(float64(rate) * dur.Seconds())
	res := &loadResult{Name: name, Rate: rate, startedAt: time.Now()}
	samples := make([]sample, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2000)
	for i := range n {
		if d := time.Until(res.startedAt.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > time.Millisecond {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-api-key", mix.next()), 5*time.Second)
			defer cancel()
			at := time.Now()
			_, err := c.Check(cctx, &healthpb.HealthCheckRequest{})
			s := sample{at: at, latency: time.Since(at), code: http.StatusOK}
			switch status.Code(err) {
			case codes.OK:
			case codes.ResourceExhausted:
				s.code = http.StatusTooManyRequests
			default:
				s.code, s.err = 0, true
				mu.Lock()
				if res.FirstErr == "" {
					res.FirstErr = err.Error()
				}
				mu.Unlock()
			}
			samples[i] = s
		})
	}
	wg.Wait()
	res.samples = samples
	res.summarise(res.startedAt, time.Time{})
	return res, ctx.Err()
}

// grpcHealthBackend serves grpc.health.v1.Health (SERVING) on a loopback
// port of this process and returns its address and a stop function.
func grpcHealthBackend() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String(), s.Stop, nil
}

// h2cLoadClient is an HTTP client that speaks only HTTP/2 without TLS.
func h2cLoadClient() *http.Client {
	c := newLoadClient()
	tr := c.Transport.(*http.Transport)
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return c
}

// h2FloorProc is the running h2 floor and the address it serves.
type h2FloorProc struct {
	*proc
	addr string
}

// startH2Floor starts the h2 floor (this harness, h2FloorFlag) in front
// of backend on the measured CPU and waits until a call through it works.
func (h *harness) startH2Floor(ctx context.Context, backend string) (*h2FloorProc, error) {
	p, addr, err := h.startFloor("h2-floor", h2FloorFlag, "http://"+backend)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Kill()
		return nil, err
	}
	defer cc.Close()
	err = waitFor(ctx, 5*time.Second, 20*time.Millisecond, "the h2 floor to answer", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil, nil
	})
	if err != nil {
		p.Kill()
		return nil, err
	}
	return &h2FloorProc{proc: p, addr: addr}, nil
}
