package regions

import (
	"context"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/proctest"
)

// proc is one tollgate process of the test.
type proc struct {
	*proctest.Proc
	// url: a gateway's proxy; ready: its (or the controller's) readiness.
	url, ready string
}

// harness starts the processes and reads the rule.
type harness struct {
	t    *testing.T
	dir  string
	bin  string
	k8s  client.Client
	rule client.ObjectKey
}

// start runs bin with args, its output in dir/name.log, and waits for
// ready; it is stopped when the test ends.
func (h *harness) start(name, ready string, args ...string) *proc {
	h.t.Helper()
	p := &proc{Proc: proctest.New(h.dir, name, h.bin, args...), ready: ready}
	if err := p.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { p.Stop(15 * time.Second) })
	h.eventually(name+" ready", func() bool { return proctest.Status(ready) == 200 }, p)
	return p
}

// restart stops p and starts it again with the same arguments.
func (h *harness) restart(p *proc) {
	h.t.Helper()
	p.Stop(15 * time.Second)
	if err := p.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.eventually(p.Name+" ready again", func() bool { return proctest.Status(p.ready) == 200 }, p)
}

// eventually polls cond for up to a minute, then fails with the logs'
// tails.
func (h *harness) eventually(what string, cond func() bool, logs ...*proc) {
	h.t.Helper()
	ps := make([]*proctest.Proc, len(logs))
	for i, p := range logs {
		ps[i] = p.Proc
	}
	proctest.Eventually(h.t, time.Minute, 50*time.Millisecond, what, cond, ps...)
}

func (h *harness) get() *v1alpha1.RateLimitRule {
	var obj v1alpha1.RateLimitRule
	if err := h.k8s.Get(context.Background(), h.rule, &obj); err != nil {
		h.t.Fatal(err)
	}
	return &obj
}

// shares is the rule's shares in force (spec's while status has none).
func shares(obj *v1alpha1.RateLimitRule) map[string]int32 {
	out := map[string]int32{}
	for _, s := range obj.Status.Regions {
		out[s.Name] = s.Percent
	}
	if len(out) == 0 {
		for _, g := range obj.Spec.Regions {
			out[g.Name] = g.Percent
		}
	}
	return out
}

// admission is one request the gateways admitted: sent and answered.
type admission struct{ sent, answered time.Time }

// load sends requests at a constant rate to gateways of two regions, the
// share of them for eu set by split (percent), and keeps the admitted.
type load struct {
	mu       sync.Mutex
	admitted []admission
	sent     int
	errs     int
	euPct    int
	// perGateway counts the requests sent to each gateway.
	perGateway map[string]int
}

func (l *load) setSplit(eu int) {
	l.mu.Lock()
	l.euPct = eu
	l.mu.Unlock()
}

// run sends perSecond requests a second until ctx ends: eu's share of
// them to eu, spread evenly, then round robin over the region's gateways.
func (l *load) run(ctx context.Context, perSecond int, eu, us []*proc) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	client := &http.Client{Timeout: 10 * time.Second}
	next := map[*[]*proc]int{} // round robin within each region
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		// eu's share of requests spread evenly (i's of them whose
		// multiple of the share crosses a whole), not in runs.
		gws := &us
		if (i+1)*l.euPct/100 > i*l.euPct/100 {
			gws = &eu
		}
		l.sent++
		g := (*gws)[next[gws]%len(*gws)]
		next[gws]++
		if l.perGateway == nil {
			l.perGateway = map[string]int{}
		}
		l.perGateway[g.Name]++
		l.mu.Unlock()
		wg.Go(func() { l.one(client, g) })
	}
}

func (l *load) one(c *http.Client, g *proc) {
	sent := time.Now()
	req, _ := http.NewRequest(http.MethodGet, g.url+"/orders", nil)
	req.Header.Set("X-Api-Key", "shop-a")
	res, err := c.Do(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs++
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		l.admitted = append(l.admitted, admission{sent, time.Now()})
	} else if res.StatusCode != http.StatusTooManyRequests {
		l.errs++
	}
}

// worstWindow is, over every window of length T that starts at an
// admitted request's send time, the most requests sent in it that were
// admitted, and the longest time one of them took: each was decided
// between its send and its answer, so the admitted of a window were
// decided within T plus that latency.
func (l *load) worstWindow(T time.Duration, outside func(time.Time) bool) (most int, latency time.Duration) {
	l.mu.Lock()
	adm := append([]admission(nil), l.admitted...)
	l.mu.Unlock()
	sort.Slice(adm, func(i, j int) bool { return adm[i].sent.Before(adm[j].sent) })
	j := 0
	for i := range adm {
		if !outside(adm[i].sent) {
			continue
		}
		for j < len(adm) && adm[j].sent.Sub(adm[i].sent) <= T {
			j++
		}
		if n := j - i; n > most {
			most = n
		}
		for k := i; k < j; k++ {
			latency = max(latency, adm[k].answered.Sub(adm[k].sent))
		}
	}
	return most, latency
}

// duration is the time from the first admitted request to the last.
func (l *load) duration() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first, last time.Time
	for _, a := range l.admitted {
		if first.IsZero() || a.sent.Before(first) {
			first = a.sent
		}
		if a.sent.After(last) {
			last = a.sent
		}
	}
	return last.Sub(first)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
