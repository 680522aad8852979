package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/proctest"
)

// A real Prometheus server (Debian's prometheus package) scraping the three
// gateways and the controller, loading config/prometheus/alerts.yaml; the
// spec below runs the shipped dashboard's queries and the alert rules in it.

// prometheusScrape is the scrape interval: short, so that a few seconds of
// Redis outage leave several samples.
const prometheusScrape = 500 * time.Millisecond

// rateInterval replaces Grafana's $__rate_interval: four scrape intervals
// and more, as Grafana computes it.
const rateInterval = "5s"

type promProc struct {
	*proc
	url string
}

// startRedisExporter runs the Redis exporter (Debian's
// prometheus-redis-exporter) on the suite's Redis, for the dashboard's
// "Redis server" row, and returns its address. Without the binary it
// returns "" (the row is then not checked), unless CI is set.
func startRedisExporter() (*proc, string) {
	bin, err := exec.LookPath("prometheus-redis-exporter")
	if err != nil {
		if os.Getenv("CI") != "" {
			Fail("prometheus-redis-exporter not found and CI is set: run hack/install-deps.sh")
		}
		GinkgoWriter.Println("prometheus-redis-exporter not found (hack/install-deps.sh installs it): the Redis server panels are not checked")
		return nil, ""
	}
	listen := fmt.Sprintf("127.0.0.1:%d", freePort())
	p := startProc("redis-exporter", bin, "-redis.addr", "redis://"+redisSrv.addr(), "-web.listen-address", listen)
	Eventually(func() int { return proctest.Status("http://" + listen + "/metrics") }, 30*time.Second, 100*time.Millisecond).Should(Equal(200), p.logTail)
	return p, listen
}

// startPrometheus runs prometheus on a free loopback port with its storage
// in a temporary directory, scraping the gateways, the controller and, when
// redisExporter is set, the Redis exporter. Without the binary the spec is
// skipped, unless CI is set.
func startPrometheus(redisExporter string) *promProc {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			Fail("prometheus not found and CI is set: run hack/install-deps.sh (installs the prometheus package)")
		}
		Skip("prometheus not found (hack/install-deps.sh installs the prometheus package)")
	}
	dir := GinkgoT().TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %v\n  scrape_timeout: %v\n  evaluation_interval: 1s\n", prometheusScrape, prometheusScrape)
	fmt.Fprintf(&cfg, "rule_files:\n- %s\n", filepath.Join(envtestutil.RepoRoot(), "config", "prometheus", "alerts.yaml"))
	target := func(addr, pod string) string {
		return fmt.Sprintf("  - targets: [%q]\n    labels: {namespace: %s, pod: %s}\n", addr, namespace, pod)
	}
	cfg.WriteString("scrape_configs:\n- job_name: tollgate-gateway\n  static_configs:\n")
	for _, g := range gateways {
		cfg.WriteString(target(strings.TrimPrefix(g.admin, "http://"), g.Name))
	}
	cfg.WriteString("- job_name: tollgate-controller\n  static_configs:\n")
	cfg.WriteString(target(controllerMetricsAddr(), "controller"))
	if redisExporter != "" {
		cfg.WriteString("- job_name: redis\n  static_configs:\n")
		cfg.WriteString(target(redisExporter, "redis-exporter"))
	}
	config := filepath.Join(dir, "prometheus.yml")
	Expect(os.WriteFile(config, []byte(cfg.String()), 0o644)).To(Succeed())
	listen := fmt.Sprintf("127.0.0.1:%d", freePort())
	p := &promProc{
		proc: startProc("prometheus", bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+listen, "--log.level=warn"),
		url: "http://" + listen,
	}
	Eventually(func() int { return proctest.Status(p.url + "/-/ready") }, 30*time.Second, 100*time.Millisecond).Should(Equal(200), p.logTail)
	return p
}

// promResult is the data of a query or query_range answer.
type promResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
		Values [][]any           `json:"values"`
	} `json:"result"`
}

// api calls Prometheus's HTTP API and returns its data, or an error with
// Prometheus's message (a query that does not parse, for one).
func (p *promProc) api(path string, params url.Values) (json.RawMessage, error) {
	res, err := http.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("%s: status %d: %w", path, res.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, body.Error)
	}
	return body.Data, nil
}

func (p *promProc) queryRange(expr string, from, to time.Time) (promResult, error) {
	var r promResult
	data, err := p.api("/api/v1/query_range", url.Values{"query": {expr},
		"start": {unix(from)}, "end": {unix(to)}, "step": {"0.5"}})
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	return r, err
}

func (p *promProc) query(expr string, at time.Time) (promResult, error) {
	var r promResult
	data, err := p.api("/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}})
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	return r, err
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// maxValue is the largest finite value of a range result's series whose
// labels hold every pair of match; NaN when there is none.
func (r promResult) maxValue(match map[string]string) float64 {
	m := math.NaN()
	for _, s := range r.Result {
		ok := true
		for k, v := range match {
			ok = ok && s.Metric[k] == v
		}
		if !ok {
			continue
		}
		values := s.Values
		if s.Value != nil {
			values = append(values, s.Value)
		}
		for _, v := range values {
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && (math.IsNaN(m) || f > m) {
				m = f
			}
		}
	}
	return m
}

// minValue is the smallest finite value of a result; NaN when there is
// none.
func (r promResult) minValue() float64 {
	m := math.NaN()
	for _, s := range r.Result {
		values := s.Values
		if s.Value != nil {
			values = append(values, s.Value)
		}
		for _, v := range values {
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && (math.IsNaN(m) || f < m) {
				m = f
			}
		}
	}
	return m
}

// dashboardTarget is one query of the shipped dashboard.
type dashboardTarget struct{ panel, expr string }

func dashboardTargets() []dashboardTarget {
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "charts", "tollgate", "dashboards", "tollgate.json"))
	Expect(err).NotTo(HaveOccurred())
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	Expect(json.Unmarshal(data, &dash)).To(Succeed())
	var out []dashboardTarget
	for _, p := range dash.Panels {
		for _, t := range p.Targets {
			// Grafana's variables: this namespace, every route.
			expr := strings.NewReplacer("$namespace", namespace, "$route", ".*", "$redis_job", ".*",
				"$__rate_interval", rateInterval).Replace(t.Expr)
			Expect(expr).NotTo(ContainSubstring("$"), "panel %q uses a variable the test does not know", p.Title)
			out = append(out, dashboardTarget{p.Title, expr})
		}
	}
	Expect(len(out)).To(BeNumerically(">=", 25))
	return out
}

// alertRules are the alerting rules of config/prometheus/alerts.yaml as
// Prometheus loaded them.
type alertRule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promProc) alertRules() []alertRule {
	data, err := p.api("/api/v1/rules", url.Values{"type": {"alert"}})
	Expect(err).NotTo(HaveOccurred())
	var r struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	Expect(json.Unmarshal(data, &r)).To(Succeed())
	var out []alertRule
	for _, g := range r.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// dashboardAndAlerts is a spec of the suite's ordered container (after the
// Conflict and outage specs, before the controller restarts): it runs the
// shipped dashboard's queries and the alert rules in a real Prometheus
// scraping the live gateways and controller, through traffic with 429s, a
// rejected reload and a Redis outage of its own.
func dashboardAndAlerts() {
	{
		ctx := context.Background()
		start := time.Now()
		exporter, exporterAddr := startRedisExporter()
		if exporter != nil {
			DeferCleanup(exporter.stop)
		}
		prom := startPrometheus(exporterAddr)
		DeferCleanup(prom.stop)
		targets := float64(len(gateways) + 1)
		if exporter != nil {
			targets++
		}
		Eventually(func() float64 {
			r, err := prom.query("sum(up)", time.Now())
			if err != nil {
				return -1
			}
			return r.maxValue(nil)
		}, 20*time.Second, 200*time.Millisecond).Should(Equal(targets), "Prometheus scrapes the gateways, the controller and the Redis exporter")

		By("driving traffic: a rule publish, 2xx, 429, 401 and a rejected route reload")
		rule := &v1alpha1.RateLimitRule{}
		rule.Name, rule.Namespace = "dashboard", "default"
		rule.Spec = v1alpha1.RateLimitRuleSpec{Tenant: "dash", Route: "list-orders", Capacity: 3,
			Refill: &v1alpha1.Refill{Tokens: 1, Period: metav1.Duration{Duration: time.Hour}}}
		Expect(k8s.Create(ctx, rule)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), rule) })
		waitRule("dash", "list-orders", 3)
		// A rule for the same tenant and route, younger: Accepted=False,
		// reason Conflict, which TollgateRulesNotAccepted sees (this spec
		// must not depend on another spec having left one).
		loser := rule.DeepCopy()
		loser.ObjectMeta = metav1.ObjectMeta{Name: "dashboard-conflict", Namespace: "default"}
		loser.Spec.Capacity = 4
		Expect(k8s.Create(ctx, loser)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), loser) })
		// A rule split between regions, whose shares the rebalancer keeps
		// (the Regions row).
		split := rule.DeepCopy()
		split.ObjectMeta = metav1.ObjectMeta{Name: "dashboard-regions", Namespace: "default"}
		split.Spec.Tenant = "dash-regions"
		split.Spec.Regions = []v1alpha1.RegionShare{{Name: "eu", Percent: 50}, {Name: "us", Percent: 50}}
		Expect(k8s.Create(ctx, split)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), split) })
		for _, g := range gateways {
			for range 5 {
				Expect(send(g, "GET", "/orders", "dash").status).To(BeElementOf(200, 429))
			}
			Expect(send(g, "GET", "/orders", "dash").status).To(Equal(429))
			Expect(send(g, "GET", "/orders", "").status).To(Equal(401))
			Expect(send(g, "GET", "/orders", "dashboard-ok").status).To(Equal(200))
		}
		concurrencyTraffic(ctx)
		responseCostTraffic(ctx)
		scriptErrorTraffic()
		tokenTraffic()
		// A reset asked of a gateway without --admin-token-file: refused
		// (403), and counted for the "Admin mutations" panel.
		res, err := http.Post(gateways[0].admin+"/debug/reset?tenant=dash&route=list-orders", "", nil)
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(http.StatusForbidden))
		routes := filepath.Join(workDir, "routes.yaml")
		good, err := os.ReadFile(routes)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(routes, []byte("routes: [\n"), 0o644)).To(Succeed())
		for _, g := range gateways {
			Eventually(func() float64 {
				return metric(g.admin+"/metrics", "tollgate_gateway_reload_errors_total", `source="routes"`)
			}, 10*time.Second, 50*time.Millisecond).Should(BeNumerically(">", 0), g.Name)
		}
		Expect(os.WriteFile(routes, good, 0o644)).To(Succeed())
		time.Sleep(3 * prometheusScrape)

		By("killing Redis until every breaker is open and Prometheus has scraped it")
		redisSrv.kill()
		outageStart := time.Now()
		traffic := func() {
			for i, g := range gateways {
				r := send(g, "GET", "/orders", fmt.Sprintf("dash-outage-%d", i))
				Expect(r.status).To(BeElementOf(200, 429), "no 5xx while Redis is down")
			}
		}
		Eventually(func() bool {
			traffic()
			for _, g := range gateways {
				if metric(g.admin+"/metrics", "tollgate_gateway_breaker_state", `state="closed"`) == 1 {
					return false
				}
			}
			return true
		}, 20*time.Second, 10*time.Millisecond).Should(BeTrue(), "every breaker leaves closed")
		Eventually(func() float64 {
			traffic()
			r, err := prom.query(`sum(tollgate_gateway_breaker_state{state="open"})`, time.Now())
			if err != nil {
				return -1
			}
			return r.maxValue(nil)
		}, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">", 0), "Prometheus scraped an open breaker")
		for deadline := time.Now().Add(6 * prometheusScrape); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			traffic()
		}
		outageEnd := time.Now()
		redisSrv.start()
		for _, g := range gateways {
			Eventually(func() float64 {
				send(g, "GET", "/orders", "dash-after-outage")
				return metric(g.admin+"/metrics", "tollgate_gateway_breaker_state", `state="closed"`)
			}, 20*time.Second, 50*time.Millisecond).Should(Equal(1.0), g.Name)
		}
		for deadline := time.Now().Add(4 * prometheusScrape); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			traffic()
		}
		end := time.Now()

		By("running every dashboard query")
		// The outage shows: these panels have a value above 0 during it
		// (in the series whose labels match), "Redis up" a 0.
		outage := map[string]map[string]string{
			"Breaker open":           nil,
			"Redis errors and waits": nil,
			"Decisions by source":    {"source": "local"},
			"Breaker state":          {"state": "open"},
		}
		// Script errors show over the run (scriptErrorTraffic broke a bucket).
		overRun := map[string]bool{"Redis script errors": true}
		// The support panels show the traffic above: the tenants refused
		// (dash on every gateway) and the refused reset.
		support := map[string]map[string]string{
			"Tenants refused (distinct, per gateway)": nil,
			"Admin mutations (tollgate reset)":        {"action": "reset", "result": "disabled"},
		}
		redisPanels := map[string]bool{"Redis up": true, "Redis memory": true, "Redis commands and clients": true, "Redis keys evicted and expired": true}
		seen := map[string]bool{}
		for _, t := range dashboardTargets() {
			if redisPanels[t.panel] && exporter == nil {
				continue
			}
			seen[t.panel] = true
			r, err := prom.queryRange(t.expr, start, end)
			Expect(err).NotTo(HaveOccurred(), "panel %q: %s", t.panel, t.expr)
			Expect(math.IsNaN(r.maxValue(nil))).To(BeFalse(), "panel %q has no data: %s", t.panel, t.expr)
			if overRun[t.panel] {
				Expect(r.maxValue(nil)).To(BeNumerically(">", 0), "panel %q over the run: %s", t.panel, t.expr)
			}
			if match, ok := outage[t.panel]; ok {
				r, err := prom.queryRange(t.expr, outageStart, outageEnd)
				Expect(err).NotTo(HaveOccurred())
				Expect(r.maxValue(match)).To(BeNumerically(">", 0), "panel %q %v during the outage: %s", t.panel, match, t.expr)
			}
			if match, ok := support[t.panel]; ok {
				Expect(r.maxValue(match)).To(BeNumerically(">", 0), "panel %q %v: %s", t.panel, match, t.expr)
			}
			if t.panel == "Redis up" {
				r, err := prom.queryRange(t.expr, outageStart, outageEnd)
				Expect(err).NotTo(HaveOccurred())
				Expect(r.minValue()).To(Equal(0.0), "panel %q during the outage: %s", t.panel, t.expr)
			}
		}
		for panel := range outage {
			Expect(seen).To(HaveKey(panel), "the outage panels are on the dashboard")
		}
		for panel := range overRun {
			Expect(seen).To(HaveKey(panel), "the script error panel is on the dashboard")
		}
		for panel := range support {
			Expect(seen).To(HaveKey(panel), "the support panels are on the dashboard")
		}
		if exporter != nil {
			for panel := range redisPanels {
				Expect(seen).To(HaveKey(panel), "the Redis server panels are on the dashboard")
			}
		}

		By("evaluating every alert rule")
		rules := prom.alertRules()
		Expect(len(rules)).To(BeNumerically(">=", 14))
		exprs := map[string]string{}
		for _, a := range rules {
			exprs[a.Name] = a.Query
			Eventually(func() string {
				for _, b := range prom.alertRules() {
					if b.Name == a.Name {
						return b.Health + " " + b.LastError
					}
				}
				return "missing"
			}, 10*time.Second, 200*time.Millisecond).Should(Equal("ok "), "rule %s evaluates without error", a.Name)
		}
		// Conditions this suite creates show in the rules' expressions (the
		// alerts themselves need minutes of "for").
		for name, at := range map[string]time.Time{
			"TollgateRedisBreakerOpen":    outageEnd,
			"TollgateLocalFallbackActive": outageEnd,
			"TollgateRedisErrorRatioHigh": outageEnd,
			"TollgateReloadErrors":        end,
			"TollgateRulesNotAccepted":    end, // dashboard-conflict
		} {
			Expect(exprs).To(HaveKey(name))
			r, err := prom.query(exprs[name], at)
			Expect(err).NotTo(HaveOccurred(), name)
			Expect(r.Result).NotTo(BeEmpty(), "%s: %s returns nothing at %v", name, exprs[name], at)
			Expect(r.Result[0].Metric["namespace"]).To(Equal(namespace), name)
		}
		for name, at := range map[string]time.Time{
			"TollgateGatewayErrors":          end, // no rule fails closed
			"TollgateUpstreamErrorRatioHigh": end,
			"TollgateSnapshotVersionSkew":    end,
			"TollgateReplicaCountMismatch":   end,
			"TollgateReplicaCountAssumed":    end, // counted from Leases
			"TollgateSnapshotStale":          end, // the gateways load what the controller publishes
			"TollgatePublishFailing":         end,
		} {
			Expect(exprs).To(HaveKey(name))
			r, err := prom.query(exprs[name], at)
			Expect(err).NotTo(HaveOccurred(), name)
			Expect(r.Result).To(BeEmpty(), "%s: %s", name, exprs[name])
		}
	}
}

// holdAndRefuse sends a request to g whose body is still being sent (it
// holds the slot: the upstream reads the whole body before it answers),
// then a second one, which must get 429; then it finishes the first, which
// must get 200. It reports false when the first request did not get its
// slot.
func holdAndRefuse(g *gatewayProc) bool {
	body, finish := io.Pipe()
	req, err := http.NewRequest("POST", g.url+"/orders", body)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("X-Api-Key", "dash-conc")
	first := make(chan int, 1)
	go func() {
		defer GinkgoRecover()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		first <- res.StatusCode
	}()
	_, _ = finish.Write([]byte("part of the body"))
	refused := false
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && !refused; time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-first:
			_ = finish.Close()
			GinkgoWriter.Printf("%s: the first request ended with %d before it could hold its slot; again\n", g.Name, code)
			return false
		default:
		}
		refused = send(g, "POST", "/orders", "dash-conc").status == http.StatusTooManyRequests
	}
	Expect(finish.Close()).To(Succeed())
	code := <-first
	return refused && code == http.StatusOK
}

// responseCostTraffic drives the dashboard's response-cost panels: a rule
// with spec.cost.response for tenant dash-cost; the e2e upstream sends no
// X-Usage-Tokens, so every response is charged the rule's default (basis
// "default").
// scriptErrorTraffic breaks one bucket in Redis (a string where the token
// bucket's hash belongs, so the script fails on it) and sends requests for
// it through every gateway: each counts script errors, the rule's failure
// mode answers (never a 5xx), and the bucket is repaired afterwards.
func scriptErrorTraffic() {
	By("breaking one bucket in Redis: script errors on every gateway")
	const tenant = "dash-broken"
	redisCLI := func(args ...string) {
		out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(redisSrv.port)}, args...)...).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}
	redisCLI("SET", "rl:{"+tenant+"}", "not a hash")
	for _, g := range gateways {
		Eventually(func() float64 {
			Expect(send(g, "GET", "/orders", tenant).status).To(BeElementOf(200, 429), g.Name)
			return metric(g.admin+"/metrics", "tollgate_gateway_redis_script_errors_total", `script="token_bucket"`)
		}, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">", 0), g.Name)
		Expect(metric(g.admin+"/metrics", "tollgate_gateway_breaker_state", `state="closed"`)).To(Equal(1.0), "script errors leave the breaker closed: %s", g.Name)
	}
	time.Sleep(2 * prometheusScrape)
	redisCLI("DEL", "rl:{"+tenant+"}")
}

// tokenTraffic sends a bearer token of the test issuer through every
// gateway, and one whose signature does not match: 200, then 401 with
// error="invalid_token".
func tokenTraffic() {
	By("sending a good and a forged bearer token through every gateway")
	good := issuerToken
	forged := good[:len(good)-4] + "AAAA"
	for _, g := range gateways {
		for token, want := range map[string]int{good: http.StatusOK, forged: http.StatusUnauthorized} {
			req, err := http.NewRequest("GET", g.url+"/orders", nil)
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			Expect(res.StatusCode).To(Equal(want), g.Name)
			if want == http.StatusUnauthorized {
				Expect(res.Header.Get("WWW-Authenticate")).To(ContainSubstring(`error="invalid_token"`), g.Name)
			}
		}
	}
}

func responseCostTraffic(ctx context.Context) {
	By("charging responses of a response-cost rule on every gateway")
	rule := &v1alpha1.RateLimitRule{}
	rule.Name, rule.Namespace = "dashboard-response-cost", "default"
	rule.Spec = v1alpha1.RateLimitRuleSpec{Tenant: "dash-cost", Route: "create-order", Capacity: 1001,
		RefillPerSecond: kptr.To[int64](1000),
		Cost:            &v1alpha1.Cost{Response: &v1alpha1.ResponseCost{Header: "X-Usage-Tokens", Default: kptr.To[int64](2)}}}
	Expect(k8s.Create(ctx, rule)).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(context.Background(), rule) })
	waitRule("dash-cost", "create-order", 1001)
	// waitRule's own requests were charged too (the default, 2 each), under
	// the rule before this one as well: the bucket may be in debt for a few
	// milliseconds, so each charged answer is waited for.
	for _, g := range gateways {
		for range 3 {
			Eventually(func() int { return send(g, "POST", "/orders", "dash-cost").status }, 5*time.Second, 10*time.Millisecond).
				Should(Equal(http.StatusOK), g.Name)
		}
	}
}

// concurrencyTraffic drives the dashboard's concurrency panels: a rule with
// spec.concurrency {maxInFlight: 1} for tenant dash-conc; on every gateway a
// request whose body is still being sent holds the slot (the upstream reads
// the whole body before it answers), so a second request gets 429 with
// Retry-After: 1; the first then ends with 200 and frees the slot.
func concurrencyTraffic(ctx context.Context) {
	By("holding a concurrency slot on every gateway: the next request gets 429")
	rule := &v1alpha1.RateLimitRule{}
	rule.Name, rule.Namespace = "dashboard-concurrency", "default"
	rule.Spec = v1alpha1.RateLimitRuleSpec{Tenant: "dash-conc", Route: "create-order", Capacity: 1000,
		RefillPerSecond: kptr.To[int64](1000), Concurrency: &v1alpha1.Concurrency{MaxInFlight: 1, LeaseSeconds: 10}}
	Expect(k8s.Create(ctx, rule)).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(context.Background(), rule) })
	waitRule("dash-conc", "create-order", 1000)
	for _, g := range gateways {
		// A loaded machine can fail the first request's slot call (its
		// Redis bound is --redis-max-wait): it then gets 429 at once and
		// holds nothing, so the round is tried again.
		Eventually(func() bool { return holdAndRefuse(g) }, 30*time.Second, 100*time.Millisecond).
			Should(BeTrue(), "%s: a second request while one holds the slot gets 429", g.Name)
	}
}
