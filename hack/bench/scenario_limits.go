package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// limitKinds are the rules the limits scenario compares: the same token
// bucket (large enough never to reject, so every request is forwarded and
// the figures are the limit's cost, not rejections), alone and with each
// limit of issue 15 on top.
var limitKinds = []struct {
	name, extra, about string
}{
	{"plain", "", "token bucket only (the baseline)"},
	{"request cost", "  cost:\n    request:\n      header: X-Cost\n", "the cost read from a request header (X-Cost: 3)"},
	{"response cost", "  cost:\n    response:\n      header: X-Usage-Tokens\n", "charged after the response from its X-Usage-Tokens header (3): a second script call"},
	{"quota", "  quota:\n    limit: 1000000000000\n    period: Month\n    timeZone: Europe/Paris\n", "a monthly quota next to the bucket, counted in the same script call"},
	{"concurrency", "  concurrency:\n    maxInFlight: 100000\n", "a cluster-wide in-flight slot, taken before forwarding and released after"},
}

// LimitsResult is scenario 9.
type LimitsResult struct {
	Rate   int        `json:"rate"`
	Direct *LimitRun  `json:"direct"`
	Kinds  []LimitRun `json:"kinds"`
}

// LimitRun is one rule kind at the scenario's rate.
type LimitRun struct {
	Kind           string  `json:"kind"`
	About          string  `json:"about"`
	P50            float64 `json:"p50Ms"`
	P99            float64 `json:"p99Ms"`
	Bad            int     `json:"bad"`
	Sent           int     `json:"sent"`
	CPUPerRequest  float64 `json:"cpuMicrosPerRequest"`
	VsPlain        float64 `json:"cpuVsPlain,omitempty"`
	RedisCmdPerReq float64 `json:"redisCommandsPerRequest"`
	ScriptsPerReq  float64 `json:"scriptCallsPerRequest"`
}

// scenarioLimits (9): added latency, gateway CPU and Redis commands per
// request of response-cost, quota and concurrency rules against the plain
// token bucket, one gateway and one Redis per kind, at one steady rate.
func (h *harness) scenarioLimits(ctx context.Context) error {
	up, err := usageUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	rate := h.plan.LimitsRate
	res := &LimitsResult{Rate: rate}
	h.res.Limits = res
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	direct, err := h.load(ctx, loadSpec{name: "direct", url: up.url + "/bench", rate: rate, dur: h.plan.LimitsDur, mix: mix})
	if err != nil {
		return err
	}
	res.Direct = &LimitRun{Kind: "direct", About: "straight to the upstream", P50: direct.P50, P99: direct.P99, Bad: direct.Bad, Sent: direct.Sent}
	for _, k := range limitKinds {
		run, err := h.limitRun(ctx, up.url, k.name, k.extra, mix)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		run.About = k.about
		if len(res.Kinds) > 0 && res.Kinds[0].CPUPerRequest > 0 {
			run.VsPlain = round(run.CPUPerRequest/res.Kinds[0].CPUPerRequest, 2)
		}
		res.Kinds = append(res.Kinds, *run)
		h.logf("%-13s p50 %.3f p99 %.3f ms, %.1f µs CPU/request, %.2f Redis commands and %.2f script calls per request, bad %d",
			k.name, run.P50, run.P99, run.CPUPerRequest, run.RedisCmdPerReq, run.ScriptsPerReq, run.Bad)
	}
	return nil
}

// limitRun measures one rule kind on a fresh Redis and gateway.
func (h *harness) limitRun(ctx context.Context, upstream, kind, extra string, mix tenantMix) (*LimitRun, error) {
	rs, err := h.startRedis(ctx, "redis-limits")
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	rule := ruleSpec{name: "limits", tenant: "*", route: "bench", capacity: 1_000_000_000, perSecond: 1_000_000_000, extra: extra}
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-limits", rules: manifests(rule), redisAddr: rs.Addr(), upstream: upstream})
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	spec := loadSpec{name: kind, url: gw.url + "/bench", rate: h.plan.LimitsRate, dur: h.plan.Warmup, mix: mix, header: http.Header{"X-Cost": {"3"}}}
	if _, err := h.load(ctx, spec); err != nil { // connections, pools, scripts
		return nil, err
	}
	rc := rs.client()
	defer rc.Close()
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	spec.dur = h.plan.LimitsDur
	r, d, err := h.loadOn(ctx, gw, spec)
	if err != nil {
		return nil, err
	}
	cmds, err := infoInt(ctx, rc, "stats", "total_commands_processed")
	if err != nil {
		return nil, err
	}
	scripts, err := scriptCalls(ctx, rc)
	if err != nil {
		return nil, err
	}
	n := float64(r.Sent)
	return &LimitRun{Kind: kind, P50: r.P50, P99: r.P99, Bad: r.Bad, Sent: r.Sent,
		CPUPerRequest: cpuPer(d.cpu, n), RedisCmdPerReq: ratio4(float64(cmds), n), ScriptsPerReq: ratio4(float64(scripts), n)}, nil
}

// usageServer is the limits scenario's upstream: the echo's answer, with
// the response cost header the response-cost rule reads.
type usageServer struct {
	url string
	srv *http.Server
}

func (u *usageServer) Close() { _ = u.srv.Close() }

func usageUpstream() (*usageServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Usage-Tokens", "3")
		_, _ = io.WriteString(w, "upstream saw "+r.Method+" "+r.URL.Path+"\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	return &usageServer{url: "http://" + ln.Addr().String(), srv: srv}, nil
}
