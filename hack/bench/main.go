// Command bench is tollgate's benchmark harness: `make bench` (full, under
// ten minutes on two cores) and `make bench-quick` (every scenario briefly,
// to check the harness itself).
//
// It starts everything on loopback: a redis-server, an echo upstream (in
// this process), gateways as separate `bin/tollgate gateway` processes (so
// their CPU and memory can be read from /proc), and for the Kubernetes
// scenarios a real kube-apiserver and etcd (envtest) with `tollgate
// controller`. Load is constant-rate and open-loop (vegeta). Every speed
// figure is reported next to a baseline measured in the same run.
//
// Results: <out>/results.json, <out>/report.md and PNG plots next to it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// scenarios in the order they run: the name -scenarios takes and the
// function that runs it.
var scenarios = []struct {
	name string
	run  func(*harness, context.Context) error
	// optIn scenarios run only when named (-scenarios), with -all, or
	// (scale-out) with -scale-out: the default run stays under twelve
	// minutes.
	optIn bool
}{
	{"latency", (*harness).scenarioLatency, false},
	{"throughput", (*harness).scenarioThroughput, false},
	{"redis-cost", (*harness).scenarioRedisCost, false},
	{"accuracy", (*harness).scenarioAccuracy, false},
	{"outage", (*harness).scenarioOutage, false},
	{"propagation", (*harness).scenarioPropagation, false},
	{"scale", (*harness).scenarioScale, false},
	{"rls", (*harness).scenarioRLS, false},
	{"limits", (*harness).scenarioLimits, false},
	{"http2", (*harness).scenarioHTTP2, true},
	{"regions", (*harness).scenarioRegions, true},
	{"scale-out", (*harness).scenarioScaleOut, true},
}

// scenarioNames are the names of scenarios, in order; defaultScenarios
// those that run unless -scenarios says otherwise.
var scenarioNames, defaultScenarios = func() (all, def []string) {
	for _, s := range scenarios {
		all = append(all, s.name)
		if !s.optIn {
			def = append(def, s.name)
		}
	}
	return all, def
}()

// config is what the flags set.
type config struct {
	quick     bool
	out       string
	tollgate  string
	scenarios []string
	seed      int64
	// pin lets the latency and rls scenarios pin processes to CPUs (pin.go).
	pin     bool
	command string // how the run was started, for the report
	// buildTo is where the tollgate binary is built; default bin/tollgate.
	// The test builds into its temporary directory instead, so that it
	// never replaces bin/tollgate under a process that runs it.
	buildTo string
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg config
	var only string
	fs.BoolVar(&cfg.quick, "quick", false, "Run the chosen scenarios briefly (every one with -all: about three minutes): checks the harness, not the machine.")
	fs.StringVar(&cfg.out, "out", ".bench", "Directory for results.json, report.md, the plots and the processes' logs.")
	fs.StringVar(&cfg.tollgate, "tollgate", "", "Use this tollgate binary instead of building bin/tollgate (with the flags of make build).")
	fs.StringVar(&only, "scenarios", strings.Join(defaultScenarios, ","), "Comma-separated scenarios to run: "+strings.Join(scenarioNames, ", ")+" (http2, regions and scale-out only when named, or with -all; scale-out also with -scale-out).")
	scaleOut := fs.Bool("scale-out", false, "Also run the scale-out scenario (about 3.5 minutes; 45 s quick): a local Redis Cluster of 3 and 6 masters (and 3 at the share of the rate that loads each master as 6 are loaded, for the scaling efficiency), 100,000 tenants, the Cluster's operations under load, and one gateway's limiter at steady rates, with and without solo sends, with a CPU profile.")
	all := fs.Bool("all", false, "Run every scenario, the opt-in ones (http2, regions, scale-out) too: what make bench-report publishes (about 18 minutes).")
	fs.Int64Var(&cfg.seed, "seed", 1, "Seed of the tenant mix.")
	fs.BoolVar(&cfg.pin, "pin", true, "In the latency scenario's CPU comparison (at the first rate) and the rls scenario, run the measured process (gateway, floors, nginx) alone on one CPU and the harness and Redis on the others, with taskset, where the machine allows (two or more CPUs). The latency steps themselves run unpinned.")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./hack/bench [-quick] [-all | -scale-out] [-out DIR] [flags]

Benchmarks tollgate on this machine: a redis-server, an echo upstream and
gateway processes on loopback, plus kube-apiserver and etcd (envtest) for the
propagation and scale scenarios. Writes DIR/results.json, DIR/report.md and
PNG plots; the processes' logs go to DIR/logs/. Progress goes to stderr.

Scenarios: %s. The default run leaves out %s (-all adds them).

Flags:
`, strings.Join(scenarioNames, ", "), strings.Join(optInScenarios(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !contains(scenarioNames, s) {
			return cfg, fmt.Errorf("-scenarios: unknown scenario %q (want %s)", s, strings.Join(scenarioNames, ", "))
		}
		cfg.scenarios = append(cfg.scenarios, s)
	}
	if *all {
		cfg.scenarios = append([]string(nil), scenarioNames...)
	}
	if *scaleOut && !contains(cfg.scenarios, "scale-out") {
		cfg.scenarios = append(cfg.scenarios, "scale-out")
	}
	cfg.command = "go run ./hack/bench " + strings.Join(args, " ")
	return cfg, nil
}

// optInScenarios are the scenarios the default run leaves out.
func optInScenarios() []string {
	var out []string
	for _, s := range scenarios {
		if s.optIn {
			out = append(out, s.name)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func main() {
	if floorMain() {
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\nbench: %s: stopping every process it started (again to force)\n", s)
		cancel()
		<-sig
		runCleanups()
		killAll()
		os.Exit(130)
	}()
	err = run(ctx, cfg)
	runCleanups()
	killAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the whole benchmark; the test calls it too.
func run(ctx context.Context, cfg config) (err error) {
	start := time.Now()
	h, err := newHarness(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.close()
	failed := 0
	for _, name := range cfg.scenarios {
		if ctx.Err() != nil {
			break
		}
		h.section(name)
		t0, l0 := time.Now(), loadAvg()
		err := h.runScenario(ctx, name)
		h.res.Meta.ScenarioSeconds[name] = round(time.Since(t0).Seconds(), 1)
		h.res.Meta.LoadAvg[name] = [2]float64{l0, loadAvg()}
		if err != nil {
			failed++
			h.res.Errors[name] = err.Error()
			h.logf("FAILED: %v", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	h.res.Meta.Seconds = round(time.Since(start).Seconds(), 1)
	if err := h.writeReport(); err != nil {
		return err
	}
	h.logf("done in %s: %s, %s", time.Since(start).Round(time.Second), h.path("report.md"), h.path("results.json"))
	var plots []string
	for _, p := range h.plots {
		plots = append(plots, h.path(p))
	}
	fmt.Fprint(os.Stderr, summary(h.res.Targets, h.path("report.md"), plots))
	if failed > 0 {
		return fmt.Errorf("%d scenario(s) failed (see the report and %s)", failed, h.logDir)
	}
	return nil
}

func (h *harness) runScenario(ctx context.Context, name string) error {
	for _, s := range scenarios {
		if s.name == name {
			return s.run(h, ctx)
		}
	}
	return fmt.Errorf("unknown scenario %q", name)
}
