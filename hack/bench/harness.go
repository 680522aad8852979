package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/procs"
	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
)

// buildFlags are `make build`'s (GO_BUILD_FLAGS, CGO_ENABLED=0) for a
// commit and build date; a test keeps them in step with the Makefile.
func buildFlags(commit, date string) []string {
	const v = "github.com/tollgate-dev/tollgate/internal/version"
	return []string{"-trimpath", "-ldflags", "-s -w -X " + v + ".commit=" + commit + " -X " + v + ".buildDate=" + date}
}

// gitOutput is a git command's output in repo, trimmed; "" when git fails
// (as the Makefile's $(shell ...)).
func gitOutput(repo string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// harness is one benchmark run's state.
type harness struct {
	cfg      config
	plan     plan
	out      string
	logDir   string
	bin      string
	repo     string
	upstream string // echo server base URL
	client   *http.Client
	res      *Results
	started  time.Time
	kube     *kubeEnv // started on first use
	echo     *procs.Echo
	plots    []string
	pin      pinning
}

func newHarness(ctx context.Context, cfg config) (*harness, error) {
	h := &harness{cfg: cfg, plan: newPlan(cfg.quick), started: time.Now(), repo: kubeapi.RepoRoot()}
	out, err := filepath.Abs(cfg.out)
	if err != nil {
		return nil, err
	}
	h.out, h.logDir = out, filepath.Join(out, "logs")
	// Logs of an earlier run would be confusing; results are overwritten.
	_ = os.RemoveAll(h.logDir)
	if err := os.MkdirAll(h.logDir, 0o755); err != nil {
		return nil, err
	}
	h.res = newResults(cfg, h.plan)
	h.pin = pinning{why: "-pin=false"}
	if cfg.pin {
		h.pin = detectPinning()
	}
	h.res.Meta.Pinning = h.pin.describe()
	h.logf("tollgate benchmark (%s): %d cores, %s; output in %s", h.res.Meta.Mode, h.res.Meta.Cores, h.res.Meta.CPUModel, h.out)
	if err := h.build(ctx); err != nil {
		return nil, err
	}
	h.client = newLoadClient()
	if h.echo, err = procs.StartEcho(); err != nil {
		return nil, err
	}
	h.upstream = h.echo.URL
	return h, nil
}

// build builds bin/tollgate as `make build` does, unless -tollgate names a
// binary.
func (h *harness) build(ctx context.Context) error {
	if h.cfg.tollgate != "" {
		bin, err := filepath.Abs(h.cfg.tollgate)
		if err != nil {
			return err
		}
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("-tollgate: %w", err)
		}
		h.bin = bin
		return nil
	}
	h.bin = filepath.Join(h.repo, "bin", "tollgate")
	if h.cfg.buildTo != "" {
		h.bin = h.cfg.buildTo
	}
	flags := buildFlags(gitOutput(h.repo, "rev-parse", "HEAD"), gitOutput(h.repo, "log", "-1", "--format=%cI"))
	if raceEnabled {
		// Under make test: a race build reuses the packages the tests
		// compiled (a release build would compile everything again), and
		// the gateways then run under the race detector too.
		flags = kubeapi.RaceBuildFlags()
	}
	env := "CGO_ENABLED=0 "
	if raceEnabled {
		env = ""
	}
	h.logf("building %s (%sgo build %s)", h.bin, env, strings.Join(flags, " "))
	args := append([]string{"build"}, flags...)
	args = append(args, "-o", h.bin, ".")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = h.repo
	cmd.Env = os.Environ()
	if !raceEnabled {
		// As the image; the race build keeps the tests' settings so that
		// their compiled packages are reused.
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building tollgate: %w\n%s", err, out.String())
	}
	return nil
}

// close stops what the harness started.
func (h *harness) close() {
	if h.kube != nil {
		h.kube.stop()
	}
	killAll()
	if h.echo != nil {
		h.echo.Close()
	}
}

func (h *harness) path(name string) string { return filepath.Join(h.out, name) }

// logf prints a progress line on stderr.
func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(h.started).Seconds(), fmt.Sprintf(format, args...))
}

func (h *harness) section(name string) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] ── %s ──\n", time.Since(h.started).Seconds(), name)
}

// cleanups run at exit, also on a second Ctrl-C (envtest's processes).
var cleanups struct {
	sync.Mutex
	fns []func()
}

func atExit(f func()) {
	var once sync.Once
	cleanups.Lock()
	cleanups.fns = append(cleanups.fns, func() { once.Do(f) })
	cleanups.Unlock()
}

func runCleanups() {
	cleanups.Lock()
	fns := cleanups.fns
	cleanups.fns = nil
	cleanups.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 3)
}

// cpuModel reads the CPU model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func goVersion() string { return runtime.Version() }

func numCPU() int { return runtime.NumCPU() }

// memTotal is the machine's memory from /proc/meminfo.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}
