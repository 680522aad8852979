package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// limiterFuncs are the roots of the limiter's CPU in a gateway profile: the
// decision on the request goroutine (rule lookup, cache, breaker, local
// buckets, and in classic mode the Redis call; the proxy calls DecideRule,
// the rate limit service Decide, which calls DecideRule) and the batcher's
// pipeline workers (writing, the socket, reading). GC work caused by their
// allocations is not attributed, so the share is a lower bound.
// TestProfileRootsExist checks that each still names a function.
var limiterFuncs = []string{
	"github.com/tollgate-dev/tollgate/dataplane/decision.(*Engine).DecideRule",
	"github.com/tollgate-dev/tollgate/dataplane/limiter.(*worker).run",
}

// profile takes a CPU profile of gw under load at the profile rate and
// estimates the limiter's CPU per decision from it.
func (h *harness) profile(ctx context.Context, gw *gatewayProc, name string, mix tenantMix) (*ProfileResult, error) {
	rate, dur := h.plan.ProfileRate, h.plan.ProfileDur
	secs := max(1, int(dur.Seconds()))
	stop, wait := h.attack(ctx, loadSpec{name: "profile", url: gw.url + "/bench", rate: rate, dur: time.Duration(secs)*time.Second + 2*time.Second, mix: mix})
	defer func() { stop(); wait() }()
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return nil, err
	}
	var data []byte
	d, err := gw.measure(ctx, func() (err error) {
		data, err = gw.cpuProfile(ctx, secs)
		return err
	})
	if err != nil {
		return nil, err
	}
	file := filepath.Join(h.out, "profile-"+name+".pb.gz")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return nil, err
	}
	p := &ProfileResult{Rate: rate, Seconds: float64(secs), CPUPerRequest: cpuPer(d.cpu, d.decisions), File: filepath.Base(file)}
	cum, err := pprofTop(ctx, file, true, 500)
	if err != nil {
		return nil, err
	}
	for _, f := range limiterFuncs {
		for _, l := range cum {
			if l.name == f {
				p.LimiterShare += l.cumPct / 100
				p.LimiterMatches = append(p.LimiterMatches, fmt.Sprintf("%s %.1f%%", shortFunc(f), l.cumPct))
			}
		}
	}
	p.LimiterShare = round(p.LimiterShare, 3)
	p.LimiterPerDec = round(p.LimiterShare*p.CPUPerRequest, 1)
	if p.Top, err = flatTop(ctx, file, 12); err != nil {
		return nil, err
	}
	return p, nil
}

// flatTop is a profile's n heaviest functions (flat), one line each.
func flatTop(ctx context.Context, file string, n int) ([]string, error) {
	flat, err := pprofTop(ctx, file, false, n)
	if err != nil {
		return nil, err
	}
	var top []string
	for _, l := range flat {
		top = append(top, fmt.Sprintf("%5.1f%% flat %5.1f%% cum  %s", l.flatPct, l.cumPct, shortFunc(l.name)))
	}
	return top, nil
}

type pprofLine struct {
	name            string
	flatPct, cumPct float64
}

// pprofTop runs `go tool pprof -top` on a profile and parses its table.
func pprofTop(ctx context.Context, file string, byCum bool, n int) ([]pprofLine, error) {
	args := []string{"tool", "pprof", "-top", "-nodecount=" + strconv.Itoa(n)}
	if byCum {
		args = append(args, "-cum")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, file)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go tool pprof: %w: %s", err, errb.String())
	}
	var lines []pprofLine
	table := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
			table = true
			continue
		}
		if !table || len(f) < 6 {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		lines = append(lines, pprofLine{name: strings.Join(f[5:], " "), flatPct: flat, cumPct: cum})
	}
	if len(lines) == 0 {
		if strings.Contains(out.String(), "Total samples = 0") {
			return nil, errNoSamples
		}
		return nil, fmt.Errorf("go tool pprof printed no table:\n%s", out.String())
	}
	return lines, nil
}

// shortFunc drops the module path from a function name.
func shortFunc(f string) string {
	return strings.TrimPrefix(f, "github.com/tollgate-dev/tollgate/")
}

// errNoSamples: the profile caught no CPU sample, which happens when the
// load generator is starved on a busy machine. The figure is then missing,
// not wrong, and the scenario goes on without it.
var errNoSamples = errors.New("the CPU profile holds no sample (machine too busy to drive the load)")

// cpuProfile takes a CPU profile of the gateway over secs seconds.
func (g *gatewayProc) cpuProfile(ctx context.Context, secs int) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", g.admin, secs), nil)
	resp, err := (&http.Client{Timeout: time.Duration(secs+10) * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/debug/pprof/profile: %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	return data, nil
}
