// Command rlsbench measures tollgate's Envoy rate limit service (not a test:
// it asserts nothing and its figures depend on the machine).
//
//	go run ./hack/rlsbench [-duration 20s] [-streams 50] [-tenants 1000]
//
// It starts redis-server on a free port, builds tollgate and runs
// `tollgate gateway --rls-listen ... --rules <tmp>` as a separate process (so
// its CPU time can be read from /proc/<pid>/stat), and drives -streams
// concurrent callers, each a loop of unary ShouldRateLimit calls over one
// shared HTTP/2 connection (as Envoy sends them), over a Zipf tenant mix. It
// prints decisions per second, p50/p99 latency, gateway CPU per decision and
// Redis commands per decision (INFO commandstats before and after), once
// with --redis-batching (the default) and once with --redis-batching=false
// as the baseline.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Envoy's Go ratelimit service on this machine (the reference).
const (
	refDecisionsPerSecond = 8000
	refCPUMicrosPerDec    = 117
	refRedisPerDecision   = 2
)

type config struct {
	duration, warmup time.Duration
	streams, tenants int
	zipfS            float64
	capacity, rate   int
	redisTimeout     time.Duration
	redisServer      string
	tollgate         string
	keep             bool
	cpuProfile       string
}

func main() {
	var c config
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "Measured time of each run.")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "Unmeasured load before each run.")
	flag.IntVar(&c.streams, "streams", 50, "Concurrent callers (each a loop of unary calls).")
	flag.IntVar(&c.tenants, "tenants", 1000, "Tenants in the Zipf mix.")
	flag.Float64Var(&c.zipfS, "zipf-s", 1.1, "Zipf exponent s (> 1) of the tenant mix.")
	flag.IntVar(&c.capacity, "capacity", 100, "Capacity of the rule (*/*) every tenant gets.")
	flag.IntVar(&c.rate, "rate", 50, "Refill per second of the rule.")
	flag.DurationVar(&c.redisTimeout, "redis-timeout", 100*time.Millisecond,
		"The gateway's --redis-timeout; generous so a busy machine does not turn late answers into local decisions (reported in the 'local' column).")
	flag.StringVar(&c.redisServer, "redis-server", "redis-server", "redis-server binary.")
	flag.StringVar(&c.tollgate, "tollgate", "", "tollgate binary; default: built from this module into a temporary directory.")
	flag.BoolVar(&c.keep, "keep", false, "Keep the temporary directory (logs).")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "Write a CPU profile of the gateway during the batching run to this file (runs it with --pprof).")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	dir, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Println("temporary directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if c.tollgate == "" {
		c.tollgate = filepath.Join(dir, "tollgate")
		fmt.Println("building tollgate ...")
		build := exec.Command("go", "build", "-trimpath", "-o", c.tollgate, ".")
		build.Dir, build.Stdout, build.Stderr = moduleRoot(), os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build: %w", err)
		}
	}
	rulesDir := filepath.Join(dir, "rules")
	if err := os.Mkdir(rulesDir, 0o755); err != nil {
		return err
	}
	rule := fmt.Sprintf(`apiVersion: ratelimit.tollgate.dev/v1alpha1
kind: RateLimitRule
metadata:
  name: everyone
spec:
  tenant: "*"
  route: "*"
  capacity: %d
  refillPerSecond: %d
`, c.capacity, c.rate)
	if err := os.WriteFile(filepath.Join(rulesDir, "rules.yaml"), []byte(rule), 0o644); err != nil {
		return err
	}

	rs, err := startRedis(c.redisServer, dir)
	if err != nil {
		return err
	}
	defer rs.stop()
	rdb := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer rdb.Close()

	fmt.Printf("\n%d streams over one connection, %v per run (after %v warm-up), %d tenants (Zipf s=%.2f), one descriptor per call;\n"+
		"rule */*: capacity %d, %d/s per tenant; gateway --redis-timeout=%v; %d CPUs\n\n",
		c.streams, c.duration, c.warmup, c.tenants, c.zipfS, c.capacity, c.rate, c.redisTimeout, numCPU())

	var results []result
	for _, batching := range []bool{true, false} {
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			return err
		}
		r, err := measure(c, dir, rulesDir, rs, rdb, batching)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	printResults(results)
	return nil
}

type result struct {
	name                 string
	decisions, errors    int64
	allowed, local       float64
	elapsed              time.Duration
	p50, p99             time.Duration
	gatewayCPU, redisCPU time.Duration
	redisCalls           int64   // commands sent by the gateway (script calls)
	redisCmds            int64   // the same plus the commands the script runs inside Redis
	roundTrips           float64 // the gateway's Redis round trips (a pipeline counts once)
}

func (r result) perSecond() float64 { return float64(r.decisions) / r.elapsed.Seconds() }
func (r result) cpuPerDecision() float64 {
	return float64(r.gatewayCPU.Microseconds()) / float64(r.decisions)
}
func (r result) perCPUSecond() float64 { return float64(r.decisions) / r.gatewayCPU.Seconds() }

func printResults(rs []result) {
	fmt.Printf("%-34s %11s %8s %8s %13s %12s %13s %13s %12s %12s %8s %6s\n",
		"run", "decisions/s", "p50", "p99", "gw CPU µs/dec", "dec/gw CPU-s", "Redis cmd/dec", "+in-script", "round trips", "Redis µs/dec", "allowed", "local")
	for _, r := range rs {
		per := func(v float64) float64 { return v / float64(r.decisions) }
		fmt.Printf("%-34s %11.0f %8s %8s %13.1f %12.0f %13.3f %13.3f %12.3f %12.1f %7.1f%% %5.2f%%\n",
			r.name, r.perSecond(), round(r.p50), round(r.p99), r.cpuPerDecision(), r.perCPUSecond(),
			per(float64(r.redisCalls)), per(float64(r.redisCmds)), per(r.roundTrips), per(float64(r.redisCPU.Microseconds())),
			100*per(r.allowed), 100*per(r.local))
		if r.errors > 0 {
			fmt.Printf("  (%d calls failed)\n", r.errors)
		}
	}
	b, base := rs[0], rs[1]
	ref := 1e6 / refCPUMicrosPerDec
	fmt.Printf("\nRedis cmd/dec: commands the gateway sends (script calls) per decision; +in-script: with the commands the token bucket\n" +
		"script runs inside Redis (TIME, HMGET, HSET, PEXPIRE), which INFO commandstats also counts; round trips: the gateway's\n" +
		"tollgate_gateway_redis_roundtrips_total (a pipeline counts once); Redis µs/dec: redis-server CPU per decision.\n")
	fmt.Printf("\nbatching vs --redis-batching=false: %.2fx decisions/s, %.2fx decisions per gateway CPU-second, %.2fx fewer Redis commands per decision\n",
		b.perSecond()/base.perSecond(), b.perCPUSecond()/base.perCPUSecond(),
		(float64(base.redisCalls)/float64(base.decisions))/(float64(b.redisCalls)/float64(b.decisions)))
	fmt.Printf("vs Envoy's ratelimit service (reference: ~%d decisions/s, %d µs CPU/decision = %.0f decisions per CPU-second, %d Redis commands/decision):\n"+
		"  batching %.2fx, --redis-batching=false %.2fx decisions per CPU-second (target >= 2x)\n",
		refDecisionsPerSecond, refCPUMicrosPerDec, ref, refRedisPerDecision, b.perCPUSecond()/ref, base.perCPUSecond()/ref)
}

func round(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

// measure runs one gateway and drives it.
func measure(c config, dir, rulesDir string, rs *redisServer, rdb *redis.Client, batching bool) (result, error) {
	name := "batching (default)"
	if !batching {
		name = "--redis-batching=false (baseline)"
	}
	fmt.Printf("run: %s ...\n", name)
	rlsPort, adminPort := freePort(), freePort()
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("gateway-batching-%v.log", batching)))
	if err != nil {
		return result{}, err
	}
	defer logf.Close()
	cmd := exec.Command(c.tollgate, "gateway",
		"--rls-listen", fmt.Sprintf("127.0.0.1:%d", rlsPort),
		"--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"--rules", rulesDir,
		"--redis-addr", rs.addr,
		"--redis-timeout", c.redisTimeout.String(),
		"--redis-batching="+strconv.FormatBool(batching), "--empty-bucket-cache="+strconv.FormatBool(batching),
		"--log-level", "warn",
		"--pprof="+strconv.FormatBool(c.cpuProfile != "" && batching))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	cc, err := grpc.NewClient(fmt.Sprintf("passthrough:///127.0.0.1:%d", rlsPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer cc.Close()
	if err := waitServing(cc, 30*time.Second); err != nil {
		return result{}, fmt.Errorf("gateway not serving (log: %s): %w", logf.Name(), err)
	}
	client := rlsv3.NewRateLimitServiceClient(cc)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort)

	// Warm-up: connections, pools, caches.
	drive(client, c, c.warmup)

	cpu0, err := procCPU(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	rcpu0, _ := procCPU(rs.cmd.Process.Pid)
	calls0, cmds0, err := redisCommands(rdb)
	if err != nil {
		return result{}, err
	}
	m0, err := scrape(metricsURL)
	if err != nil {
		return result{}, err
	}
	profiled := make(chan error, 1)
	if c.cpuProfile != "" && batching {
		go func() {
			profiled <- fetch(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", adminPort, max(1, int(c.duration.Seconds())-1)), c.cpuProfile)
		}()
	} else {
		profiled <- nil
	}
	t0 := time.Now()
	lat, decisions, failed := drive(client, c, c.duration)
	elapsed := time.Since(t0)
	cpu1, err := procCPU(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	rcpu1, _ := procCPU(rs.cmd.Process.Pid)
	calls1, cmds1, err := redisCommands(rdb)
	if err != nil {
		return result{}, err
	}
	m1, err := scrape(metricsURL)
	if err != nil {
		return result{}, err
	}
	if err := <-profiled; err != nil {
		return result{}, fmt.Errorf("CPU profile: %w", err)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	return result{
		name: name, decisions: decisions, errors: failed, elapsed: elapsed,
		p50: pct(0.50), p99: pct(0.99),
		gatewayCPU: cpu1 - cpu0, redisCPU: rcpu1 - rcpu0,
		redisCalls: calls1 - calls0, redisCmds: cmds1 - cmds0,
		roundTrips: m1.value("tollgate_gateway_redis_roundtrips_total") - m0.value("tollgate_gateway_redis_roundtrips_total"),
		allowed:    m1.sum(`result="allowed"`) - m0.sum(`result="allowed"`),
		local:      m1.sum(`source="local"`) - m0.sum(`source="local"`),
	}, nil
}

// drive runs c.streams callers for d and returns the latencies of the
// successful calls, their number and the number of failed calls.
func drive(client rlsv3.RateLimitServiceClient, c config, d time.Duration) ([]time.Duration, int64, int64) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		ok, fail atomic.Int64
	)
	deadline := time.Now().Add(d)
	for i := range c.streams {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))
			zipf := rand.NewZipf(rng, c.zipfS, 1, uint64(c.tenants-1))
			lat := make([]time.Duration, 0, 1<<14)
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant"}, {Key: "route", Value: "bench"}},
			}}}
			for time.Now().Before(deadline) {
				req.Descriptors[0].Entries[0].Value = "t" + strconv.FormatUint(zipf.Uint64(), 10)
				start := time.Now()
				_, err := client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					fail.Add(1)
					continue
				}
				lat = append(lat, time.Since(start))
			}
			ok.Add(int64(len(lat)))
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, ok.Load(), fail.Load()
}

func waitServing(cc *grpc.ClientConn, timeout time.Duration) error {
	h := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("health %v", res.Status)
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procCPU is the user+system CPU time of a process, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces), in ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / time.Duration(clockTicks()), nil
}

var ticks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

func clockTicks() int64 { return ticks() }

// redisCommands sums the calls of the commands in INFO commandstats, except
// the benchmark's own (info, flushall, ping, config, client, hello): calls
// counts those sent by clients, cmds adds the ones the token bucket script
// runs inside Redis.
func redisCommands(rdb *redis.Client) (calls, cmds int64, err error) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		inScript := false
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "info", "flushall", "ping", "config", "client", "hello", "select", "command":
			continue
		case "time", "hmget", "hset", "pexpire":
			inScript = true
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				cmds += n
				if !inScript {
					calls += n
				}
			}
		}
	}
	return calls, cmds, nil
}

// metrics is a scraped /metrics text.
type metrics []string

// sum adds the tollgate_gateway_decisions_total series whose labels contain
// sel.
func (m metrics) sum(sel string) float64 {
	var t float64
	for _, l := range m {
		if !strings.HasPrefix(l, "tollgate_gateway_decisions_total{") || !strings.Contains(l, sel) {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			v, _ := strconv.ParseFloat(l[i+1:], 64)
			t += v
		}
	}
	return t
}

// value is the value of an unlabelled series.
func (m metrics) value(name string) float64 {
	for _, l := range m {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func scrape(url string) (metrics, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var m metrics
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		m = append(m, sc.Text())
	}
	return m, sc.Err()
}

// fetch writes the body of url to path.
func fetch(url, path string) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(bin, dir string) (*redisServer, error) {
	port := freePort()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w (install redis-server, e.g. hack/install-deps.sh)", bin, err)
	}
	rs := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return rs, nil
		}
		if time.Now().After(deadline) {
			rs.stop()
			return nil, errors.New("redis-server did not answer PING")
		}
	}
}

func (r *redisServer) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "."
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "processor\t:")
}
