// Package top answers "which tenants are refused most right now?" with
// fixed memory and no metric label per tenant: each gateway keeps, over a
// sliding window, a space-saving summary of its rejections by tenant and
// route (the top K with a bounded error) and a HyperLogLog of the tenants
// it refused (their distinct count). The gateway serves a Report at
// /debug/top on its admin listener; `tollgate top` merges the reports of
// every gateway (Merge).
//
// Error bound. With R rejections in the window on a gateway and K
// counters per slot, a listed pair's Rejections is at least its true count
// and at most Error more, Error <= Floor <= R/K; a pair not listed had at
// most Floor rejections, so every pair refused more than R/K times is
// listed. Merged over gateways the same holds with R the rejections of
// them all. Admissions are counted exactly in total, and per pair only
// while the pair is tracked: a lower bound.
package top

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Options configure a Tracker; the zero value gives the defaults.
type Options struct {
	// K is the number of (tenant, route) pairs each slot tracks. Default
	// 64. Memory: about 200 bytes per pair and 4 KiB (the HyperLogLog)
	// per slot, 100 KiB at the defaults.
	K int
	// Window is the time a Report covers. Default 1m.
	Window time.Duration
	// Slots divide the window, which moves in steps of Window/Slots: a
	// Report covers between Window - Window/Slots and Window. Default 6.
	Slots int
	// Clock is the local clock; default time.Now. Tests move it.
	Clock func() time.Time
}

// Defaults of Options.
const (
	DefaultK      = 64
	DefaultWindow = time.Minute
	DefaultSlots  = 6
)

// Tracker counts decisions by tenant and route over the window. Safe for
// concurrent use; Observe takes one lock and allocates nothing once the
// slots are in use.
type Tracker struct {
	opts    Options
	slotLen int64 // nanoseconds
	mu      sync.Mutex
	slots   []slot // a ring, by slot start
}

// slot is one step of the window.
type slot struct {
	start   int64 // Unix nanoseconds, a multiple of slotLen; 0: unused
	sum     *summary
	tenants hll
}

// New returns a Tracker.
func New(opts Options) *Tracker {
	if opts.K <= 0 {
		opts.K = DefaultK
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Slots <= 0 {
		opts.Slots = DefaultSlots
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	t := &Tracker{opts: opts, slotLen: max(1, int64(opts.Window)/int64(opts.Slots)), slots: make([]slot, opts.Slots)}
	for i := range t.slots {
		t.slots[i].sum = newSummary(opts.K)
	}
	return t
}

// Observe counts one decision of tenant on route: a rejection when
// !allowed (a request refused, 429 or OVER_LIMIT or a failure mode's
// 503), else an admission.
func (t *Tracker) Observe(tenant, route string, allowed bool) {
	now := t.opts.Clock().UnixNano()
	key := Key{Tenant: tenant, Route: route}
	t.mu.Lock()
	s := t.current(now)
	if allowed {
		s.sum.admit(key)
	} else {
		s.sum.reject(key)
		s.tenants.add(tenant)
	}
	t.mu.Unlock()
}

// current is the slot that holds now, emptied if it held an older step.
// The caller holds t.mu.
func (t *Tracker) current(now int64) *slot {
	start := now - now%t.slotLen
	s := &t.slots[(start/t.slotLen)%int64(len(t.slots))]
	if s.start != start {
		s.start = start
		clear(s.sum.counters)
		s.sum.byCount = s.sum.byCount[:0]
		s.sum.rejections, s.sum.admissions = 0, 0
		s.tenants = hll{}
	}
	return s
}

// Report is what one gateway, or several merged, counted in the window.
type Report struct {
	// Gateway and Region name the gateway that answered (its pod name and
	// --region); empty in a merged report.
	Gateway string `json:"gateway,omitempty"`
	Region  string `json:"region,omitempty"`
	// WindowSeconds is the time covered (the window moves in steps).
	WindowSeconds float64 `json:"windowSeconds"`
	// K is the number of pairs each slot tracks.
	K int `json:"k"`
	// Rejections and Admissions are every decision's, exact.
	Rejections int64 `json:"rejections"`
	Admissions int64 `json:"admissions"`
	// Floor is the most rejections a pair that is not listed had; every
	// listed pair's Error is at most Floor, and Floor at most
	// Rejections/K.
	Floor int64 `json:"floor"`
	// Entries are the pairs refused most, most refused first.
	Entries []Entry `json:"entries"`
	// RefusedTenants estimates how many distinct tenants were refused
	// (HyperLogLog, standard error 1.6%); RefusedTenantsSketch holds its
	// registers, for merging.
	RefusedTenants       float64 `json:"refusedTenants"`
	RefusedTenantsSketch string  `json:"refusedTenantsSketch"`
}

// Entry is one pair of a Report.
type Entry struct {
	Key
	// Rejections is an upper bound: the true count is between
	// Rejections - Error and Rejections.
	Rejections int64 `json:"rejections"`
	Error      int64 `json:"error"`
	// Admissions were counted while the pair was tracked: a lower bound.
	Admissions int64 `json:"admissions"`
	// Rule is the rule in force for the pair, as the gateway that answered
	// sees it; nil when the Tracker's user does not fill it.
	Rule *Rule `json:"rule,omitempty"`
}

// Rule describes the rule in force for a pair.
type Rule struct {
	// Source is the RateLimitRule (namespace/name), or "built-in default".
	Source string `json:"source"`
	// Tenant and Route are its selectors ("*": any).
	Tenant   string `json:"tenant"`
	Route    string `json:"route"`
	Capacity int64  `json:"capacity"`
	// Rate is the refill rate in short form ("100/s", "10/1m").
	Rate string `json:"rate"`
}

// Report returns the limit pairs refused most in the window (all that are
// tracked when limit <= 0).
func (t *Tracker) Report(limit int) Report {
	now := t.opts.Clock().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	oldest := now - now%t.slotLen - int64(len(t.slots)-1)*t.slotLen
	m := newMerger()
	m.out.WindowSeconds, m.out.K = float64(now-oldest)/1e9, t.opts.K
	for i := range t.slots {
		s := &t.slots[i]
		if s.start < oldest || s.start == 0 {
			continue
		}
		f := s.sum.floor()
		for _, c := range s.sum.byCount {
			m.entry(Entry{Key: c.key, Rejections: c.count, Error: c.err, Admissions: c.admitted}, f)
		}
		m.part(s.sum.rejections, s.sum.admissions, f)
		m.tenants.merge(&s.tenants)
	}
	return m.finish(limit)
}

// RefusedTenants estimates the distinct tenants refused in the window
// (tollgate_gateway_refused_tenants), without building a Report.
func (t *Tracker) RefusedTenants() float64 {
	now := t.opts.Clock().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	oldest := now - now%t.slotLen - int64(len(t.slots)-1)*t.slotLen
	var h hll
	for i := range t.slots {
		if s := &t.slots[i]; s.start >= oldest && s.start != 0 {
			h.merge(&s.tenants)
		}
	}
	return h.estimate()
}

// cut sorts the entries, most refused first, and keeps limit of them
// (all when limit <= 0); Floor then covers the pairs cut off too.
func (r *Report) cut(limit int) {
	slices.SortFunc(r.Entries, func(a, b Entry) int {
		if c := cmp.Compare(b.Rejections, a.Rejections); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return cmp.Compare(a.Route, b.Route)
	})
	if limit > 0 && len(r.Entries) > limit {
		r.Floor = max(r.Floor, r.Entries[limit].Rejections)
		r.Entries = r.Entries[:limit]
	}
	if r.Entries == nil {
		r.Entries = []Entry{}
	}
}
