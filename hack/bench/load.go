package main

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// tenantMix picks the tenant (X-Api-Key) of each request. Safe for
// concurrent use: vegeta calls the targeter from many workers.
type tenantMix interface {
	next() string
	describe() string
}

// zipfMix is the skewed mix of the Redis cost and throughput scenarios: one
// hot tenant takes hotShare of the requests, the others follow a Zipf law
// of exponent s.
type zipfMix struct {
	mu       sync.Mutex
	r        *rand.Rand
	z        *rand.Zipf
	tenants  int
	s        float64
	hotShare float64
}

func newZipfMix(seed int64, tenants int, s, hotShare float64) *zipfMix {
	r := rand.New(rand.NewSource(seed))
	return &zipfMix{r: r, z: rand.NewZipf(r, s, 1, uint64(tenants-2)), tenants: tenants, s: s, hotShare: hotShare}
}

// hotTenant is the hot tenant's id.
const hotTenant = "tenant-0000"

func tenantID(i int) string { return fmt.Sprintf("tenant-%04d", i) }

func (m *zipfMix) next() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.r.Float64() < m.hotShare {
		return hotTenant
	}
	return tenantID(1 + int(m.z.Uint64()))
}

func (m *zipfMix) describe() string {
	return fmt.Sprintf("%d tenants, %s at %.0f%% of requests, the rest Zipf s=%.1f", m.tenants, hotTenant, 100*m.hotShare, m.s)
}

// oneTenant sends every request as one tenant.
type oneTenant string

func (o oneTenant) next() string     { return string(o) }
func (o oneTenant) describe() string { return "only " + string(o) }

// roundRobin cycles over a few tenants.
type roundRobin struct {
	mu      sync.Mutex
	i       int
	tenants []string
}

func (r *roundRobin) next() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.i++
	return r.tenants[r.i%len(r.tenants)]
}

func (r *roundRobin) describe() string { return fmt.Sprintf("%d tenants, round robin", len(r.tenants)) }

// loadSpec is one constant-rate, open-loop run.
type loadSpec struct {
	name string
	url  string
	rate int
	dur  time.Duration // 0: until the returned stop function is called
	mix  tenantMix
	// header is added to every request (besides X-Api-Key).
	header http.Header
	// client sends the requests instead of the harness's HTTP/1.1 one.
	client *http.Client
}

// sample is one request's outcome.
type sample struct {
	at      time.Time // when it was sent
	latency time.Duration
	code    uint16
	err     bool
}

// loadResult summarises a run. Latencies are in milliseconds.
type loadResult struct {
	Name      string         `json:"name"`
	Rate      int            `json:"rate"`
	Seconds   float64        `json:"seconds"`
	Sent      int            `json:"sent"`
	SentRate  float64        `json:"sentRate"`
	Codes     map[string]int `json:"codes"`
	Bad       int            `json:"bad"` // neither 2xx nor 429 (transport errors included)
	BadFrac   float64        `json:"badFraction"`
	P50       float64        `json:"p50Ms"`
	P90       float64        `json:"p90Ms"`
	P99       float64        `json:"p99Ms"`
	P999      float64        `json:"p999Ms"`
	Max       float64        `json:"maxMs"`
	FirstErr  string         `json:"firstError,omitempty"`
	samples   []sample
	startedAt time.Time
}

// newLoadClient is the HTTP client every attack shares, so that keep-alive
// connections outlive one attack (a vegeta Attacker cannot be reused).
func newLoadClient() *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 10000,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// attack runs spec and collects every result. With spec.dur == 0 it runs
// until stop is called; the returned wait function returns the result.
func (h *harness) attack(ctx context.Context, spec loadSpec) (stop func(), wait func() *loadResult) {
	// Workers grow as needed to keep the rate (open loop) up to a bound:
	// past it the machine is saturated anyway, and the race detector
	// allows at most 8128 live goroutines.
	maxWorkers := uint64(2000)
	if raceEnabled {
		maxWorkers = 1000
	}
	c := h.client
	if spec.client != nil {
		c = spec.client
	}
	atk := vegeta.NewAttacker(vegeta.Client(c), vegeta.MaxBody(0), vegeta.Workers(32), vegeta.MaxWorkers(maxWorkers))
	targeter := func(t *vegeta.Target) error {
		t.Method = http.MethodGet
		t.URL = spec.url
		t.Header = http.Header{"X-Api-Key": []string{spec.mix.next()}}
		for k, v := range spec.header {
			t.Header[k] = v
		}
		return nil
	}
	res := &loadResult{Name: spec.name, Rate: spec.rate, Codes: map[string]int{}, startedAt: time.Now()}
	if spec.dur > 0 {
		res.samples = make([]sample, 0, int(float64(spec.rate)*spec.dur.Seconds()*1.05)+16)
	}
	ch := atk.Attack(targeter, vegeta.ConstantPacer{Freq: spec.rate, Per: time.Second}, spec.dur, spec.name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := range ch {
			bad := r.Code == 0 || (r.Code/100 != 2 && r.Code != http.StatusTooManyRequests)
			res.samples = append(res.samples, sample{at: r.Timestamp, latency: r.Latency, code: r.Code, err: bad})
			if bad && res.FirstErr == "" {
				res.FirstErr = r.Error
			}
		}
	}()
	stopCtx := context.AfterFunc(ctx, func() { atk.Stop() })
	stop = func() { atk.Stop() }
	wait = func() *loadResult {
		<-done
		stopCtx()
		res.summarise(res.startedAt, time.Time{})
		return res
	}
	return stop, wait
}

// load runs spec for its duration and returns the result.
func (h *harness) load(ctx context.Context, spec loadSpec) (*loadResult, error) {
	_, wait := h.attack(ctx, spec)
	r := wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// summarise computes the figures from the samples sent in [from, to) (a
// zero to means no end).
func (r *loadResult) summarise(from, to time.Time) {
	var lat []time.Duration
	r.Codes = map[string]int{}
	r.Bad = 0
	first, last := time.Time{}, time.Time{}
	for _, s := range r.samples {
		if s.at.Before(from) || (!to.IsZero() && !s.at.Before(to)) {
			continue
		}
		if first.IsZero() || s.at.Before(first) {
			first = s.at
		}
		if s.at.After(last) {
			last = s.at
		}
		lat = append(lat, s.latency)
		r.Codes[codeName(s.code)]++
		if s.err {
			r.Bad++
		}
	}
	r.Sent = len(lat)
	if r.Sent == 0 {
		return
	}
	span := last.Sub(first).Seconds()
	if !to.IsZero() {
		span = to.Sub(from).Seconds()
	}
	r.Seconds = span
	if span > 0 {
		r.SentRate = float64(r.Sent) / span
	}
	r.BadFrac = float64(r.Bad) / float64(r.Sent)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.P50, r.P90, r.P99, r.P999 = ms(quantile(lat, .5)), ms(quantile(lat, .9)), ms(quantile(lat, .99)), ms(quantile(lat, .999))
	r.Max = ms(lat[len(lat)-1])
}

// window returns a copy of r summarised over [from, to).
func (r *loadResult) window(name string, from, to time.Time) *loadResult {
	w := &loadResult{Name: name, Rate: r.Rate, samples: r.samples, startedAt: from}
	w.summarise(from, to)
	w.samples = nil
	return w
}

func codeName(c uint16) string {
	if c == 0 {
		return "error"
	}
	return fmt.Sprint(c)
}

// quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// ok2xx is the number of proxied (2xx) responses.
func (r *loadResult) ok2xx() int {
	n := 0
	for k, v := range r.Codes {
		if len(k) == 3 && k[0] == '2' {
			n += v
		}
	}
	return n
}

func (r *loadResult) String() string {
	return fmt.Sprintf("%d req/s: sent %d (%.0f/s), p50 %.3fms p99 %.3fms p99.9 %.3fms, bad %.2f%% %v",
		r.Rate, r.Sent, r.SentRate, r.P50, r.P99, r.P999, 100*r.BadFrac, r.Codes)
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }
