package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
)

// TestQuickRunProducesReport runs the whole harness in quick mode into a
// temporary directory and checks that it produces a parseable results.json,
// report.md and plots. It asserts no speed: it keeps the harness from
// rotting.
//
// Needs redis-server and the envtest binaries (kube-apiserver and etcd, for
// the propagation and scale scenarios; hack/envtest.sh provides them) and
// builds tollgate (into its temporary directory). About two minutes on two cores with a warm build
// cache; skipped with -short.
func TestQuickRunProducesReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark scenario briefly (redis-server, envtest, gateway processes); skipped with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed (hack/install-deps.sh installs it): %v", err)
	}
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-all", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	cfg.buildTo = filepath.Join(out, "tollgate")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(func() { runCleanups(); killAll() })
	if err := run(ctx, cfg); err != nil {
		// The report keeps the first lines of each error; the log tail
		// that says why a process exited is at the end, so it is printed
		// here whole.
		var whole strings.Builder
		if res, jerr := readResults(out); jerr == nil {
			for name, e := range res.Errors {
				fmt.Fprintf(&whole, "\n%s:\n%s\n", name, e)
			}
		}
		t.Fatalf("quick run: %v\nreport:\n%s\nerrors in full:%s", err, readFile(filepath.Join(out, "report.md")), whole.String())
	}

	res, err := readResults(out)
	if err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if res.Meta.Mode != "quick" || len(res.Errors) > 0 {
		t.Fatalf("mode %q, errors %v", res.Meta.Mode, res.Errors)
	}
	switch {
	case res.Latency == nil || len(res.Latency.Steps) != 3:
		t.Error("latency: want three rates")
	case len(res.Latency.ProxyFloor) != 1 || len(res.Latency.FastFloor) != 1:
		t.Error("latency: want the net/http and the fasthttp floor")
	case res.Throughput == nil || len(res.Throughput.Modes) != 4:
		t.Error("throughput: want four limiter modes")
	case res.RedisCost == nil || len(res.RedisCost.Modes) != 3:
		t.Error("redis cost: want three Redis modes")
	case res.Accuracy == nil || len(res.Accuracy.Cases) != 12:
		t.Error("accuracy: want 4 cases (healthy, prefetch, slow, outage) x 3 instance counts")
	case res.Outage == nil || res.Outage.During == nil || res.Outage.During.Sent == 0:
		t.Error("outage: no traffic during the outage")
	case res.Regions == nil || len(res.Regions.Shift) != 2 || len(res.Regions.Overhead) != 2 || res.Regions.Overhead[0].Decisions == 0:
		t.Error("regions: want the static and adaptive runs and both overhead modes")
	case res.Propagation == nil || res.Propagation.Changes != 3:
		t.Error("propagation: want three changes")
	case res.Scale == nil || res.Scale.RedisBytesPerBkt <= 0 || res.Scale.RSS <= 0 || res.Scale.PublishSeconds <= 0:
		t.Error("scale: missing figures")
	case res.RLS == nil || len(res.RLS.Modes) != 3 || slices.ContainsFunc(res.RLS.Modes, func(r RLSRun) bool { return r.Calls == 0 }):
		t.Error("rls: want calls in three limiter modes (classic, batched, local)")
	case res.RLS.Floor == nil || res.RLS.Floor.Calls == 0 || res.RLS.Floor.CPUPerDecision <= 0 || res.RLS.Modes[0].VsFloor <= 0:
		t.Error("rls: want the floor's calls and CPU, and the modes against it")
	case len(res.RLS.Steady) != 2 || res.RLS.Steady[0].Busy != 0 || res.RLS.Steady[1].Busy <= 0:
		t.Error("rls: want two steady passes, at the reference's rate and a busy one")
	case res.HTTP2 == nil || len(res.HTTP2.Rows) != 4 || res.HTTP2.Rows[1].VsBaseline <= 0 || res.HTTP2.Rows[3].VsBaseline <= 0:
		t.Error("http2: want HTTP/1.1, h2c, the h2 floor and gRPC through the gateway, with their CPU ratios")
	case res.Limits == nil || len(res.Limits.Kinds) != len(limitKinds):
		t.Error("limits: want every rule kind")
	}
	checkScaleOut(t, res.ScaleOut, newPlan(true), out)
	if l := res.Limits; l != nil {
		for _, k := range l.Kinds {
			// Requests were sent, and decided in Redis.
			if k.Sent == 0 || k.ScriptsPerReq <= 0 {
				t.Errorf("limits %s: %+v", k.Kind, k)
			}
		}
	}
	if res.RLS != nil { // nil: reported above
		for _, p := range res.RLS.Steady {
			if len(p.Modes) != 3 || p.Floor == nil {
				t.Errorf("rls %s: want the three modes and the floor", p.name())
				continue
			}
			// Paced, not as fast as each target answers (a closed loop runs
			// 20-50x faster), and kept up.
			for _, run := range append(p.Modes, *p.Floor) {
				if r := run.PerSecond / float64(p.Rate); r < 0.5 || r > 1.25 {
					t.Errorf("rls %s: %s ran at %.0f calls/s", p.name(), run.Mode, run.PerSecond)
				}
			}
		}
	}
	if len(res.Targets) == 0 {
		t.Error("no target checks")
	}
	report := readFile(filepath.Join(out, "report.md"))
	for _, want := range []string{"## Targets", "## 1. Added latency", "## 7. Memory and scale", "## 9. Limits beyond the token bucket", "## 11. HTTP/2 and gRPC", "## 12. Region shares that follow the traffic", ".png)",
		"## 10. Scale-out on a Redis Cluster", "max/mean master CPU", "The Cluster's operations under load", "One gateway's limiter at steady rates",
		"Without shards the hot tenant's master does", "Redis Cluster scaling, decisions per Redis CPU-second", "**Scaling efficiency**"} {
		if !strings.Contains(report, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	if len(pngs) == 0 {
		t.Fatal("no PNG plot written")
	}
	for _, p := range pngs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
			t.Errorf("%s is not a PNG", p)
		}
	}
	// Nothing the harness started may outlive it.
	registry.Lock()
	pids := append([]int(nil), registry.pids...)
	registry.Unlock()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still running after the run", pid)
		}
	}
}

// checkScaleOut checks that the scale-out scenario measured every row:
// the passes of soPasses (3 and 6 masters with shards at the rate, 3 at the
// rate per master of 6, in every round, then 3 without shards) with each
// master's figures, the operations' windows and moved tenants, the steady
// rates.
func checkScaleOut(t *testing.T, r *ScaleOutResult, p plan, out string) {
	t.Helper()
	want := soPasses(p)
	if r == nil || len(r.Passes) != len(want) || len(want) != 3*p.ScaleOutRounds+1 || r.Ops == nil || len(r.Steady) != 6 {
		t.Fatalf("scale-out: want %d passes, the operations and three steady rates in two modes, got %+v", 3*p.ScaleOutRounds+1, r)
	}
	for i, p := range r.Passes {
		w := want[i]
		if p.Masters != w.masters || len(p.MastersDetail) != w.masters || p.Shards != w.shards || p.Rate != w.rate || p.Round != w.round {
			t.Errorf("scale-out pass %d: %d masters (%d detailed), shards %v, %d/s, round %d; want %+v", i, p.Masters, len(p.MastersDetail), p.Shards, p.Rate, p.Round, w)
		}
		if p.Decisions == 0 || p.Exact == 0 || p.HotExact == 0 || p.ScriptCallsPerDec <= 0 || p.RedisCPUPer1000 <= 0 || p.RedisCPUSeconds <= 0 || p.MaxMeanCPU < 1 || p.BytesPerBucket <= 0 {
			t.Errorf("scale-out %s: missing figures %+v", p.Name, p)
		}
		for _, m := range p.MastersDetail {
			if m.ScriptCalls == 0 || m.Keys == 0 || m.CommandsPS <= 0 {
				t.Errorf("scale-out %s: master %s has no traffic: %+v", p.Name, m.Addr, m)
			}
		}
	}
	if last := r.Passes[len(r.Passes)-1]; last.HotMaster == "" {
		t.Error("scale-out: the pass without shards names no hot master")
	}
	if o := r.Ops; len(o.Steps) != 4 || len(o.Tenants) != 3 || o.Decisions == 0 || o.Exact == 0 {
		t.Errorf("scale-out operations: want 4 windows and 3 tenants, got %+v", o)
	}
	for i, s := range r.Steady {
		// The profile is written; a quick pass (a second at a few hundred
		// decisions/s) may hold too few samples to name a function.
		if _, err := os.Stat(filepath.Join(out, s.Profile)); err != nil || s.Decisions == 0 || s.RoundTripsPerDec <= 0 || s.CPUPerDec <= 0 || s.Workers != (i%2 == 1) {
			t.Errorf("scale-out steady %d/s: missing figures %+v (profile: %v)", s.Rate, s, err)
		}
		// The quick rates are far below DefaultSoloGap's: with the
		// defaults most decisions go solo, with workers only none.
		if s.Workers && s.SoloPerDec != 0 || !s.Workers && i == 0 && s.SoloPerDec < 0.5 {
			t.Errorf("scale-out steady %d/s (workers only %v): %.4f solo sends per decision", s.Rate, s.Workers, s.SoloPerDec)
		}
	}
}

// TestOptInScenarios: the default run leaves http2, regions and scale-out
// out; -scenarios names them, -all adds every one, -scale-out adds only
// scale-out, and no scenario runs twice.
func TestOptInScenarios(t *testing.T) {
	optIn := []string{"http2", "regions", "scale-out"}
	for _, x := range []struct {
		args []string
		want []string // of optIn
	}{
		{nil, nil},
		{[]string{"-scale-out"}, []string{"scale-out"}},
		{[]string{"-scenarios", "scale-out"}, []string{"scale-out"}},
		{[]string{"-scenarios", "scale-out", "-scale-out"}, []string{"scale-out"}},
		{[]string{"-scenarios", "http2,latency"}, []string{"http2"}},
		{[]string{"-all"}, optIn},
		{[]string{"-all", "-scale-out"}, optIn},
		{[]string{"-all", "-scenarios", "latency"}, optIn},
	} {
		cfg, err := parseFlags(x.args)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range optIn {
			n := 0
			for _, s := range cfg.scenarios {
				if s == name {
					n++
				}
			}
			if want := contains(x.want, name); (n == 1) != want || n > 1 {
				t.Errorf("%q: %s %d times in %v", x.args, name, n, cfg.scenarios)
			}
		}
		if contains(x.args, "-all") && len(cfg.scenarios) != len(scenarioNames) {
			t.Errorf("%q: %v, want every scenario %v", x.args, cfg.scenarios, scenarioNames)
		}
	}
	if d := defaultScenarios; len(d) == 0 || contains(d, "http2") || contains(d, "regions") || contains(d, "scale-out") {
		t.Errorf("default scenarios %v", d)
	}
}

// The exact count is an exact token bucket per tenant: full at the first
// decision, refilled continuously, one token per admission.
func TestExactCount(t *testing.T) {
	rules := newSORules(10000, false) // t000000: capacity 1500, 1500/s
	var decs []soDecision
	for i := range 3000 { // 3000 decisions in the first 100 ms
		decs = append(decs, soDecision{at: int64(i) * int64(time.Millisecond) / 30, tenant: 0})
	}
	decs = append(decs, soDecision{at: int64(10 * time.Second), tenant: 7}, soDecision{at: int64(10*time.Second) + 1, tenant: 7})
	got := exactCount(decs, rules)
	// 1500 at once, then 1500/s over the 100 ms: about 150 more.
	if n := got[0]; n < 1640 || n > 1652 {
		t.Errorf("hot tenant: exact %d, want about 1650", n)
	}
	if got[7] != 2 {
		t.Errorf("a default tenant's two decisions: %d admitted, want 2", got[7])
	}
}

// TestBuildFlagsMatchMakefile keeps the harness's build of bin/tollgate in
// step with `make build`.
func TestBuildFlagsMatchMakefile(t *testing.T) {
	mk := readFile(filepath.Join(kubeapi.RepoRoot(), "Makefile"))
	m := regexp.MustCompile(`(?m)^GO_BUILD_FLAGS := (.*)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("no GO_BUILD_FLAGS in the Makefile")
	}
	f := buildFlags("$(COMMIT)", "$(BUILD_DATE)")
	if want := f[0] + " " + f[1] + ` "` + f[2] + `"`; strings.TrimSpace(m[1]) != want {
		t.Fatalf("Makefile GO_BUILD_FLAGS %q, harness %q: update buildFlags in harness.go", m[1], want)
	}
}

func TestParseProm(t *testing.T) {
	m, err := parseProm(strings.NewReader(`# HELP x
tollgate_gateway_decisions_total{result="allowed",route="bench",source="redis"} 10
tollgate_gateway_decisions_total{result="allowed",route="bench",source="local"} 3
tollgate_gateway_breaker_state{state="open"} 1
tollgate_gateway_redis_roundtrips_total 7
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.decisions(); got != 13 {
		t.Errorf("decisions %v, want 13", got)
	}
	if got := m.sum("tollgate_gateway_decisions_total", `source="local"`); got != 3 {
		t.Errorf("local decisions %v, want 3", got)
	}
	if got := m.sum("tollgate_gateway_breaker_state", `state="open"`); got != 1 {
		t.Errorf("breaker open %v", got)
	}
	if got := m.sum("tollgate_gateway_redis_roundtrips_total"); got != 7 {
		t.Errorf("round trips %v", got)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if q := quantile(d, .99); q != 990*time.Millisecond {
		t.Errorf("p99 %v", q)
	}
	if q := quantile(d, .999); q != 999*time.Millisecond {
		t.Errorf("p99.9 %v", q)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// A gateway of the rls scenario that cannot start (here: no redis-server
// on PATH) is an error, and its cleanup runs without a nil dereference.
func TestRLSGatewayThatFailsToStartIsAnError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	h := &harness{logDir: t.TempDir()}
	if _, err := h.rlsGateway(t.Context(), limiterMode{name: "batched"}); err == nil {
		t.Fatal("started a gateway without redis-server")
	}
}

// readResults reads the run's results.json from out.
func readResults(out string) (*Results, error) {
	var res Results
	err := json.Unmarshal([]byte(readFile(filepath.Join(out, "results.json"))), &res)
	return &res, err
}
