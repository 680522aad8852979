package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// scenarioLatency (1): direct to the upstream vs through one gateway, at
// 2,500 req/s and 2x and 4x that.
//
// The latency steps run unpinned: the load generator, the upstream and
// Redis on one CPU could not carry even the direct path at 2,500 req/s
// (p99 of 0.2-0.3 s direct in pinned runs). The CPU comparison at the
// first rate (the gateway, nginx, the floors) runs pinned afterwards
// (latencyReferences).
func (h *harness) scenarioLatency(ctx context.Context) error {
	rs, err := h.startRedis(ctx, "redis-latency")
	if err != nil {
		return err
	}
	defer rs.Kill()
	rule := generousRule(false)
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-latency", rules: manifests(rule), redisAddr: rs.Addr()})
	if err != nil {
		return err
	}
	defer gw.stop()
	mix := newZipfMix(h.cfg.seed, h.plan.Tenants, h.plan.ZipfS, h.plan.HotShare)
	res := &LatencyResult{Mix: mix.describe(), Rule: rule.String()}
	h.res.Latency = res
	direct, via := h.upstream+"/bench", gw.url+"/bench"

	// Warm up both paths: connections, the script cache, the buckets.
	for _, u := range []string{via, direct} {
		if _, err := h.load(ctx, loadSpec{name: "warm-up", url: u, rate: 1000, dur: h.plan.Warmup, mix: mix}); err != nil {
			return err
		}
	}
	for _, rate := range h.plan.LatencyRates {
		d, err := h.load(ctx, loadSpec{name: "direct", url: direct, rate: rate, dur: h.plan.LatencyDur, mix: mix})
		if err != nil {
			return err
		}
		g, c, err := h.loadOn(ctx, gw, loadSpec{name: "gateway", url: via, rate: rate, dur: h.plan.LatencyDur, mix: mix})
		if err != nil {
			return err
		}
		st := LatencyStep{
			Rate: rate, Direct: d, Gateway: g,
			AddedP50: round(g.P50-d.P50, 3), AddedP99: round(g.P99-d.P99, 3), AddedP999: round(g.P999-d.P999, 3),
			CPUPerRequest: cpuPer(c.cpu, float64(g.ok2xx())),
		}
		res.Steps = append(res.Steps, st)
		h.logf("%5d req/s  direct p50 %.3f p99 %.3f p99.9 %.3f ms | gateway p50 %.3f p99 %.3f p99.9 %.3f ms | added p99 %+.3f ms | gateway CPU %.1f µs/request | bad %.2f%%",
			rate, d.P50, d.P99, d.P999, g.P50, g.P99, g.P999, st.AddedP99, st.CPUPerRequest, 100*g.BadFrac)
	}
	gw.stop()
	return h.latencyReferences(ctx, res, mix, rs, rule)
}

// latencyReferences measures, at the first rate, a gateway, nginx and the
// floors into res, each alone on the measured CPU (the harness and Redis on
// the others) when the machine allows. nginx and the floors are only
// references: a failure is noted, not fatal.
func (h *harness) latencyReferences(ctx context.Context, res *LatencyResult, mix tenantMix, rs *redisServer, rule ruleSpec) error {
	restore, err := h.pin.pinSelf()
	if err != nil {
		return err
	}
	defer restore()
	h.logf("%s", h.pin.describe())
	if h.pin.ok() {
		if err := setAffinity(rs.Pid(), h.pin.rest); err != nil {
			return err
		}
		defer func() { _ = setAffinity(rs.Pid(), h.pin.all) }()
	}
	gw, err := h.startGateway(ctx, gatewaySpec{name: "gw-latency-pinned", rules: manifests(rule), redisAddr: rs.Addr(), pin: true})
	if err != nil {
		return err
	}
	step, err := h.reference(ctx, "gateway", gw.url+"/bench", gw.Pid(), mix)
	gw.stop()
	if err != nil {
		return err
	}
	res.Pinned = append(res.Pinned, step)
	if err := h.nginxReference(ctx, res, mix); err != nil {
		res.Note = "nginx reference skipped: " + err.Error()
		h.logf("%s", res.Note)
	}
	for _, f := range proxyFloors {
		step, err := h.proxyFloorReference(ctx, f, mix)
		if err != nil {
			res.Note += " " + f.name + " skipped: " + err.Error()
			h.logf("%s skipped: %v", f.name, err)
			continue
		}
		if f.flag == fastFloorFlag {
			res.FastFloor = append(res.FastFloor, step)
		} else {
			res.ProxyFloor = append(res.ProxyFloor, step)
		}
	}
	return nil
}

// proxyFloor is a bare reverse proxy this harness serves as a process of
// its own (floors.go).
type proxyFloor struct {
	name, flag, proc string
}

// proxyFloors are the HTTP floors of the latency scenario: Go's net/http
// engine and valyala/fasthttp, each without the limiter.
var proxyFloors = []proxyFloor{
	{name: "net/http floor", flag: proxyFloorFlag, proc: "proxy-floor"},
	{name: "fasthttp floor", flag: fastFloorFlag, proc: "fasthttp-floor"},
}

// proxyFloorReference measures a bare reverse proxy (this harness run
// with f's flag) to the same upstream at the first rate: an HTTP engine's
// own cost, without the limiter.
func (h *harness) proxyFloorReference(ctx context.Context, f proxyFloor, mix tenantMix) (LatencyStep, error) {
	p, addr, err := h.startFloor(f.proc, f.flag, h.upstream)
	if err != nil {
		return LatencyStep{}, err
	}
	defer p.Kill()
	url := "http://" + addr + "/bench"
	if err := waitFor(ctx, 5*time.Second, 20*time.Millisecond, "the "+f.name+" to answer", func() (bool, error) {
		r, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		return true, nil
	}); err != nil {
		return LatencyStep{}, err
	}
	return h.reference(ctx, f.name, url, p.Pid(), mix)
}

// nginxConf is the reference nginx's configuration: a plain reverse proxy
// with keep-alive upstream connections, everything under the folder %[1]s,
// to the upstream %[2]s, listening on port %[3]d.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream echo { server %[2]s; keepalive 64; }
  server {
    listen 127.0.0.1:%[3]d;
    location / { proxy_pass http://echo; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`

// startNginx starts the reference nginx in front of the harness's upstream
// and waits until it answers; it returns the process and its URL for the
// load.
func (h *harness) startNginx(ctx context.Context) (*proc, string, error) {
	const bin = "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		return nil, "", fmt.Errorf("%s is not installed (bash hack/install-deps.sh nginx installs it)", bin)
	}
	dir := filepath.Join(h.logDir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	conf := fmt.Sprintf(nginxConf, dir, strings.TrimPrefix(h.upstream, "http://"), port)
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	cmd, args := h.pin.command(bin, "-c", confPath, "-p", dir)
	p, err := startProc("nginx", filepath.Join(dir, "nginx.log"), cmd, args...)
	if err != nil {
		return nil, "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/bench", port)
	var last error
	err = waitFor(ctx, 5*time.Second, 20*time.Millisecond, "nginx to answer", func() (bool, error) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return true, nil
		}
		last = err
		if p.Exited() {
			return false, p.exitError()
		}
		return false, nil
	})
	if err != nil {
		p.Stop(2 * time.Second)
		return nil, "", fmt.Errorf("%w (last: %v)", err, last)
	}
	return p, url, nil
}

// nginxReference measures nginx as a plain reverse proxy to the same
// upstream at the first rate, if /usr/sbin/nginx exists (make bench
// installs it; the report notes its absence).
func (h *harness) nginxReference(ctx context.Context, res *LatencyResult, mix tenantMix) error {
	p, url, err := h.startNginx(ctx)
	if err != nil {
		return err
	}
	defer p.Stop(2 * time.Second)
	step, err := h.reference(ctx, "nginx", url, p.Pid(), mix)
	if err != nil {
		return err
	}
	res.Nginx = append(res.Nginx, step)
	return nil
}

// reference measures a reference proxy (process pid, serving url) at the
// first rate, next to direct calls to the upstream just before.
func (h *harness) reference(ctx context.Context, name, url string, pid int, mix tenantMix) (LatencyStep, error) {
	rate := h.plan.LatencyRates[0]
	if _, err := h.load(ctx, loadSpec{name: "warm-up", url: url, rate: 1000, dur: h.plan.Warmup, mix: mix}); err != nil {
		return LatencyStep{}, err
	}
	d, err := h.load(ctx, loadSpec{name: "direct", url: h.upstream + "/bench", rate: rate, dur: h.plan.LatencyDur, mix: mix})
	if err != nil {
		return LatencyStep{}, err
	}
	cpu0, _ := cpuTime(pid)
	n, err := h.load(ctx, loadSpec{name: name, url: url, rate: rate, dur: h.plan.LatencyDur, mix: mix})
	if err != nil {
		return LatencyStep{}, err
	}
	cpu1, _ := cpuTime(pid)
	h.logf("%s reference at %d req/s: added p50 %+.3f ms, p99 %+.3f ms, %.1f µs CPU/request", name, rate, n.P50-d.P50, n.P99-d.P99, cpuPer(cpu1-cpu0, float64(n.Sent)))
	return LatencyStep{
		Rate: rate, Direct: d, Gateway: n,
		AddedP50: round(n.P50-d.P50, 3), AddedP99: round(n.P99-d.P99, 3), AddedP999: round(n.P999-d.P999, 3),
		CPUPerRequest: cpuPer(cpu1-cpu0, float64(n.Sent)),
	}, nil
}
