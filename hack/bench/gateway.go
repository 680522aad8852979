package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// gatewaySpec says how to run one `tollgate gateway` process.
type gatewaySpec struct {
	name string
	// rules is a RateLimitRule manifest (standalone mode); empty means
	// Kubernetes mode (kubeconfig and namespace then required).
	rules string
	// rulesFile, when set, is a manifest file the gateway reads (and
	// polls) as it is, shared with whoever rewrites it.
	rulesFile  string
	redisAddr  string
	kubeconfig string
	namespace  string
	snapshot   string // --snapshot-name; default tollgate-rules
	extra      []string
	// readyWithin bounds the wait for /readyz. Default 30s.
	readyWithin time.Duration
	// pin runs the gateway alone on the measured CPU (h.pin).
	pin bool
	// upstream is the base URL /bench goes to; default the echo upstream.
	upstream string
	// routes, when set, is the whole routes file instead of routesYAML.
	routes string
}

// gatewayProc is a running gateway.
type gatewayProc struct {
	*proc
	url   string // proxy base URL
	admin string // admin base URL
	// readyAfter is the time from process start to the first /readyz 200.
	readyAfter time.Duration
}

// routesYAML routes /bench to the echo upstream.
const routesYAML = `routes:
  - id: bench
    pathPrefix: /bench
    upstream: %s
`

// startGateway starts a gateway process and waits until it is ready.
func (h *harness) startGateway(ctx context.Context, s gatewaySpec) (*gatewayProc, error) {
	dir := filepath.Join(h.logDir, s.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	routes := filepath.Join(dir, "routes.yaml")
	upstream := s.upstream
	if upstream == "" {
		upstream = h.upstream
	}
	table := fmt.Sprintf(routesYAML, upstream)
	if s.routes != "" {
		table = s.routes
	}
	if err := os.WriteFile(routes, []byte(table), 0o644); err != nil {
		return nil, err
	}
	// The ports were free a moment ago; another process of the run (or a
	// test package next to it) may take one before the gateway binds it,
	// so a gateway that exits on a taken port is started again on new ones.
	for attempt := 1; ; attempt++ {
		g, err := h.startGatewayOnce(ctx, s, dir, routes)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return g, err
		}
		h.logf("%s: a port was taken before the gateway bound it; starting it again on new ports", s.name)
	}
}

// startGatewayOnce starts the gateway on two ports free a moment ago and
// waits until it is ready.
func (h *harness) startGatewayOnce(ctx context.Context, s gatewaySpec, dir, routes string) (*gatewayProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"gateway",
		"--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"--routes", routes,
		// The load sends tenant ids as keys (as the earlier results did).
		"--identity", "header-is-tenant",
		"--log-format", "json", "--log-level", "info",
		"--shutdown-grace", "1s",
		"--pprof",
	}
	more, err := s.sourceArgs(dir)
	if err != nil {
		return nil, err
	}
	args = append(args, more...)
	bin := h.bin
	if s.pin {
		bin, args = h.pin.command(bin, args...)
	}
	p, err := startProc(s.name, filepath.Join(dir, "gateway.log"), bin, args...)
	if err != nil {
		return nil, err
	}
	g := &gatewayProc{proc: p, url: fmt.Sprintf("http://127.0.0.1:%d", port), admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort)}
	within := s.readyWithin
	if within == 0 {
		within = 30 * time.Second
	}
	if err := g.waitReady(ctx, within); err != nil {
		p.Kill()
		return nil, err
	}
	return g, nil
}

// sourceArgs are the gateway's flags for Redis, its rules (a manifest
// written into dir, or the cluster) and s.extra.
func (s gatewaySpec) sourceArgs(dir string) ([]string, error) {
	var args []string
	if s.redisAddr != "" {
		args = append(args, "--redis-addr", s.redisAddr)
	}
	if s.rulesFile != "" {
		args = append(args, "--rules", s.rulesFile)
	} else if s.rules != "" {
		rules := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(rules, []byte(s.rules), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--rules", rules)
	} else {
		args = append(args, "--kubeconfig", s.kubeconfig, "--snapshot-namespace", s.namespace, "--pod-name", s.name)
		if s.snapshot != "" {
			args = append(args, "--snapshot-name", s.snapshot)
		}
	}
	return append(args, s.extra...), nil
}

// waitReady polls /readyz every few milliseconds.
func (g *gatewayProc) waitReady(ctx context.Context, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := g.started.Add(within)
	for {
		resp, err := c.Get(g.admin + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				g.readyAfter = time.Since(g.started)
				return nil
			}
		}
		if g.Exited() {
			return g.exitError()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; last lines of %s:\n%s", g.name, within, g.logPath, tail(g.logPath, 10))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop ends the gateway (SIGTERM, then SIGKILL).
func (g *gatewayProc) stop() {
	if g != nil {
		g.Stop(3 * time.Second)
	}
}

// cpu is the gateway's CPU time so far.
func (g *gatewayProc) cpu() time.Duration {
	d, _ := cpuTime(g.Pid())
	return d
}

// promSamples are the samples of one /metrics scrape: name{labels} → value,
// with labels as written by the Prometheus text format.
type promSamples map[string]float64

// metrics scrapes /metrics. A gateway drowning in load may answer late:
// it gets three tries.
func (g *gatewayProc) metrics(ctx context.Context) (promSamples, error) {
	var err error
	for range 3 {
		var m promSamples
		if m, err = g.scrape(ctx); err == nil || ctx.Err() != nil {
			return m, err
		}
	}
	return nil, err
}

func (g *gatewayProc) scrape(ctx context.Context) (promSamples, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.admin+"/metrics", nil)
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", g.name, err)
	}
	defer resp.Body.Close()
	return parseProm(resp.Body)
}

var metricsClient = &http.Client{Timeout: 5 * time.Second}

func parseProm(r io.Reader) (promSamples, error) {
	m := promSamples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// sum adds every sample of metric name whose labels contain all of the
// given label="value" pairs.
func (m promSamples) sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// decisions is the total of tollgate_gateway_decisions_total.
func (m promSamples) decisions() float64 { return m.sum("tollgate_gateway_decisions_total") }

// counters are the counters read before and after a run.
type counters struct {
	cpu        time.Duration
	decisions  float64
	roundTrips float64
	commands   float64
	redisDecs  float64
}

func (g *gatewayProc) counters(ctx context.Context) (counters, error) {
	m, err := g.metrics(ctx)
	if err != nil {
		return counters{}, err
	}
	return counters{
		cpu:        g.cpu(),
		decisions:  m.decisions(),
		roundTrips: m.sum("tollgate_gateway_redis_roundtrips_total"),
		commands:   m.sum("tollgate_gateway_redis_commands_total"),
		redisDecs:  m.sum("tollgate_gateway_redis_decisions_total"),
	}, nil
}

// measure runs f and returns how the gateway's counters moved meanwhile.
func (g *gatewayProc) measure(ctx context.Context, f func() error) (counters, error) {
	c0, err := g.counters(ctx)
	if err != nil {
		return counters{}, err
	}
	if err := f(); err != nil {
		return counters{}, err
	}
	c1, err := g.counters(ctx)
	if err != nil {
		return counters{}, err
	}
	return c1.sub(c0), nil
}

// loadOn runs the load spec against gw and returns its result and how the
// gateway's counters moved meanwhile.
func (h *harness) loadOn(ctx context.Context, gw *gatewayProc, spec loadSpec) (r *loadResult, d counters, err error) {
	d, err = gw.measure(ctx, func() error {
		r, err = h.load(ctx, spec)
		return err
	})
	return r, d, err
}

func (c counters) sub(o counters) counters {
	return c.add(counters{-o.cpu, -o.decisions, -o.roundTrips, -o.commands, -o.redisDecs})
}

func (c counters) add(o counters) counters {
	return counters{c.cpu + o.cpu, c.decisions + o.decisions, c.roundTrips + o.roundTrips, c.commands + o.commands, c.redisDecs + o.redisDecs}
}

// cpuPer is CPU microseconds per n events.
func cpuPer(cpu time.Duration, n float64) float64 {
	if n <= 0 {
		return 0
	}
	return round(float64(cpu)/1e3/n, 1)
}
