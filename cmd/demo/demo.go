// Package demo runs tollgate's local demo: a redis-server, an echo upstream
// and a gateway with the sample rules, then traffic that shows the limits,
// the headers, a live rule change and a Redis failure. It cleans up after
// itself.
package demo

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/config/samples"
	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/procs"
)

// Options configure the demo.
type Options struct {
	// RedisAddr reuses a running Redis instead of starting one.
	RedisAddr string
	// Out receives the report.
	Out io.Writer
	// Log receives the gateway's own logs (discarded by default).
	Log logr.Logger
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Use this Redis (host:port) instead of starting a redis-server for the demo.")
}

// demo is one run's state.
type demo struct {
	opts     Options
	dir      string
	redis    *procs.Redis
	echo     *procs.Echo
	gw       *gateway.Gateway
	url      string
	rulesDir string
	client   *http.Client
	gwDone   chan struct{}
	stop     context.CancelFunc
}

// Run runs the demo and returns an error if any step did not behave as
// expected.
func Run(ctx context.Context, opts Options) error {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	dir, err := os.MkdirTemp("", "tollgate-demo-")
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	d := &demo{opts: opts, dir: dir, client: &http.Client{Timeout: 10 * time.Second}, stop: stop}
	defer d.cleanup()
	return d.run(ctx)
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.opts.Out, format, args...) }

func (d *demo) run(ctx context.Context) error {
	d.printf("tollgate demo\n\n")
	redisAddr, err := d.startRedis(ctx)
	if err != nil {
		return err
	}
	if d.echo, err = procs.StartEcho(); err != nil {
		return err
	}
	upstream := d.echo.URL
	d.printf("  upstream   echo server at %s\n", upstream)
	if err := d.startGateway(ctx, redisAddr, upstream); err != nil {
		return err
	}
	d.printf("  gateway    %s  (rules: the %d manifests of config/samples/, reloaded on change)\n\n", d.url, d.gw.Rules().Current().Len())

	if err := d.unknownKey(); err != nil {
		return err
	}
	if err := d.burst(); err != nil {
		return err
	}
	if err := d.seedCheck(); err != nil {
		return err
	}
	if d.redis != nil {
		if err := d.redisOutage(); err != nil {
			return err
		}
	}
	d.printf("\nAll steps behaved as expected. Everything started for the demo is stopped again.\n")
	return nil
}

// startRedis starts redis-server on a free port, or reuses --redis-addr, or
// returns "" (in-process limiter) when redis-server is not installed.
func (d *demo) startRedis(ctx context.Context) (string, error) {
	if d.opts.RedisAddr != "" {
		if err := ping(ctx, d.opts.RedisAddr, 3*time.Second); err != nil {
			return "", fmt.Errorf("--redis-addr %s: %w", d.opts.RedisAddr, err)
		}
		d.printf("  redis      using %s\n", d.opts.RedisAddr)
		return d.opts.RedisAddr, nil
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		d.printf("  redis      redis-server is not installed (hack/install-deps.sh installs it);\n" +
			"             the demo runs on the in-process limiter instead\n")
		return "", nil
	}
	r, err := procs.StartRedis(procs.RedisConfig{Dir: d.dir})
	if err != nil {
		return "", err
	}
	d.redis = r
	d.printf("  redis      redis-server started at %s for the demo\n", r.Addr())
	return r.Addr(), nil
}

func ping(ctx context.Context, addr string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		err := c.Ping(ctx).Err()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const routesYAML = `routes:
  - id: create-order
    methods: [POST]
    path: /orders
    upstream: %[1]s
  - id: list-orders
    methods: [GET]
    path: /orders
    upstream: %[1]s
  - id: reports
    methods: [GET]
    pathPrefix: /reports
    upstream: %[1]s
`

// startGateway writes the demo's files and starts a gateway in standalone
// mode on them, in this process.
func (d *demo) startGateway(ctx context.Context, redisAddr, upstream string) error {
	routes, keys, err := d.writeFiles(upstream)
	if err != nil {
		return err
	}
	var o gateway.Options
	o.AddFlags(pflag.NewFlagSet("demo", pflag.ContinueOnError))
	o.Listen, o.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	o.RoutesFile, o.RulesPath, o.APIKeysFile = routes, d.rulesDir, keys
	o.ReloadInterval = 100 * time.Millisecond
	o.ShutdownGrace = 2 * time.Second
	if redisAddr == "" {
		o.Limiter = gateway.LimiterLocal
	} else {
		o.Redis.Addrs = []string{redisAddr}
		// A generous deadline: the demo shows Redis decisions, not timeouts
		// on a busy laptop. Production keeps the 5ms default.
		o.RedisTimeout = 5 * time.Second
	}
	gw, err := gateway.New(o, d.opts.Log)
	if err != nil {
		return err
	}
	d.gw, d.url, d.gwDone = gw, "http://"+gw.Addr(), make(chan struct{})
	go func() {
		defer close(d.gwDone)
		if err := gw.Run(ctx); err != nil {
			d.opts.Log.Error(err, "gateway stopped")
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !gw.Ready() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// writeFiles writes the sample rules into d.rulesDir, a route file to
// upstream and an API key file, and returns the paths of the last two.
func (d *demo) writeFiles(upstream string) (routes, keys string, err error) {
	d.rulesDir = filepath.Join(d.dir, "rules")
	if err := os.Mkdir(d.rulesDir, 0o755); err != nil {
		return "", "", err
	}
	err = fs.WalkDir(samples.Files, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := samples.Files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(d.rulesDir, path), b, 0o644)
	})
	if err != nil {
		return "", "", err
	}
	routes = filepath.Join(d.dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(fmt.Sprintf(routesYAML, upstream)), 0o644); err != nil {
		return "", "", err
	}
	// Secure by default: each tenant's API key maps to the tenant in a key
	// file, and keys not in it get 401.
	var keyFile strings.Builder
	keyFile.WriteString("keys:\n")
	for _, tenant := range demoTenants {
		fmt.Fprintf(&keyFile, "  - tenant: %s\n    key: %s\n", tenant, demoKey(tenant))
	}
	keys = filepath.Join(d.dir, "api-keys.yaml")
	if err := os.WriteFile(keys, []byte(keyFile.String()), 0o600); err != nil {
		return "", "", err
	}
	return routes, keys, nil
}

// result is one response, reduced to what the demo prints.
type result struct {
	status                int
	remaining, retryAfter string
}

// demoTenants are the tenants of the demo's API key file.
var demoTenants = []string{"shop-a", "shop-b", "shop-c", "shop-d"}

// demoKey is tenant's API key in the demo.
func demoKey(tenant string) string { return "demo-key-of-" + tenant }

// send sends one request with tenant's API key.
func (d *demo) send(method, path, tenant string) (result, error) {
	return d.sendKey(method, path, demoKey(tenant))
}

// sendKey sends one request with the API key key.
func (d *demo) sendKey(method, path, key string) (result, error) {
	req, err := http.NewRequest(method, d.url+path, nil)
	if err != nil {
		return result{}, err
	}
	req.Header.Set("X-Api-Key", key)
	res, err := d.client.Do(req)
	if err != nil {
		return result{}, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return result{res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("Retry-After")}, nil
}

// unknownKey shows that a key outside the key file, such as a tenant's name,
// gets 401.
func (d *demo) unknownKey() error {
	res, err := d.sendKey("POST", "/orders", "shop-a")
	if err != nil {
		return err
	}
	d.printf("0. API keys map to tenants (api-keys.yaml, one key per tenant); other keys are refused\n\n"+
		"   POST /orders  X-Api-Key: shop-a  ->  %d  (a tenant's name is not its key)\n\n", res.status)
	if res.status != http.StatusUnauthorized {
		return fmt.Errorf("a key that is not in the key file answered %d, want 401", res.status)
	}
	return nil
}

// burstCell is one tenant on one route in the burst.
type burstCell struct{ tenant, method, path, route string }

// burstCells are the tenants and routes of the burst.
var burstCells = []burstCell{
	{"shop-a", "POST", "/orders", "create-order"},
	{"shop-a", "GET", "/reports/daily", "reports"},
	{"shop-b", "POST", "/orders", "create-order"},
	{"shop-b", "GET", "/orders", "list-orders"},
	{"shop-c", "POST", "/orders", "create-order"},
	{"shop-c", "GET", "/reports/daily", "reports"},
}

// burstCounts are the answers of one cell.
type burstCounts struct{ ok, limited, other int }

// burst sends concurrent requests from several tenants and tabulates them.
func (d *demo) burst() error {
	const perCell = 60
	d.printf("1. A burst: %d requests at once from each tenant on each route\n\n", perCell)
	start := time.Now()
	got, err := d.fire(burstCells, perCell)
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	d.printf("   %-8s %-14s %-42s %5s %5s\n", "tenant", "route", "rule in force", "200", "429")
	for i, c := range burstCells {
		r := d.gw.Rules().Lookup(c.tenant, c.route)
		name := r.Source + fmt.Sprintf(" (burst %d)", r.Capacity)
		d.printf("   %-8s %-14s %-42s %5d %5d\n", c.tenant, c.route, name, got[i].ok, got[i].limited)
		if got[i].other != 0 {
			return fmt.Errorf("%s on %s: %d unexpected responses", c.tenant, c.route, got[i].other)
		}
		// The bucket admits its capacity at once, plus what refills while
		// the burst lasts.
		lo := min(int(r.Capacity), perCell)
		hi := min(perCell, int(float64(r.Capacity)+r.RatePerSecond()*elapsed.Seconds())+1)
		if got[i].ok < lo || got[i].ok > hi {
			return fmt.Errorf("%s on %s: %d admitted in %v, want %d to %d", c.tenant, c.route, got[i].ok, elapsed, lo, hi)
		}
	}
	d.printf("\n   Each tenant+route has its own bucket: the burst admits the rule's capacity, plus\n"+
		"   what the rule refills during the %v the burst took.\n\n", elapsed.Round(time.Millisecond))
	return nil
}

// fire sends perCell requests for every cell, all at once, and counts the
// answers of each cell.
func (d *demo) fire(cells []burstCell, perCell int) ([]burstCounts, error) {
	got := make([]burstCounts, len(cells))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for i, c := range cells {
		for range perCell {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := d.send(c.method, c.path, c.tenant)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					firstErr = err
				case r.status == 200:
					got[i].ok++
				case r.status == 429:
					got[i].limited++
				default:
					got[i].other++
				}
			}()
		}
	}
	wg.Wait()
	return got, firstErr
}

// seedCheck edits shop-a's rule to capacity 2 and shows 200, 200, 429.
func (d *demo) seedCheck() error {
	d.printf("2. A live rule change: shop-a's create-order rule edited to capacity 2, 1 per minute\n")
	path := filepath.Join(d.rulesDir, "ratelimit_v1alpha1_ratelimitrule_shop-a.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	edited := strings.Replace(strings.Replace(string(b), "capacity: 200", "capacity: 2", 1),
		"refillPerSecond: 100", "refill: {tokens: 1, period: 1m}", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.gw.Rules().Lookup("shop-a", "create-order").Capacity != 2 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not reload the edited rule")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.printf("   (the gateway reloaded it without a restart)\n\n")
	want := []int{200, 200, 429}
	for i := range want {
		r, err := d.send("POST", "/orders", "shop-a")
		if err != nil {
			return err
		}
		line := fmt.Sprintf("   POST /orders  X-Api-Key: %s  ->  %d  X-RateLimit-Remaining: %s", demoKey("shop-a"), r.status, r.remaining)
		if r.retryAfter != "" {
			line += "  Retry-After: " + r.retryAfter
		}
		d.printf("%s\n", line)
		if r.status != want[i] {
			return fmt.Errorf("request %d answered %d, want %d", i+1, r.status, want[i])
		}
	}
	d.printf("\n   Retry-After is exact: the seconds until the next token exists.\n\n")
	return nil
}

// redisOutage kills Redis and shows the gateway still limiting.
func (d *demo) redisOutage() error {
	d.printf("3. Redis dies (SIGKILL) while traffic continues\n\n")
	d.redis.Kill()
	d.redis = nil
	codes := map[int]int{}
	for range 30 {
		r, err := d.send("GET", "/orders", "shop-d")
		if err != nil {
			return err
		}
		codes[r.status]++
	}
	keys := make([]int, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d x %d", codes[k], k))
	}
	d.printf("   30 x GET /orders from shop-d  ->  %s\n", strings.Join(parts, ", "))
	d.printf("   circuit breaker: %s; each gateway now limits locally with 1/N of every rule (N=%d here)\n",
		d.gw.BreakerState(), d.gw.Replicas())
	if codes[200] == 0 || codes[500]+codes[502]+codes[503] > 0 {
		return fmt.Errorf("during the outage: %v, want the gateway to keep serving", codes)
	}
	return nil
}

func (d *demo) cleanup() {
	d.stop()
	if d.gwDone != nil {
		<-d.gwDone
	}
	if d.redis != nil {
		d.redis.Kill()
	}
	if d.echo != nil {
		d.echo.Close()
	}
	_ = os.RemoveAll(d.dir)
}
