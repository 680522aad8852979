package snapshot

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Rule is one compiled limit. Field names are short because 100,000 of them
// are stored, and the fields are in an order that packs the small ones
// together (BenchmarkLoadedSetMemory measures a loaded rule's bytes).
type Rule struct {
	// Tenant is a tenant id or "*".
	Tenant string `json:"t"`
	// Route is a route id or "*".
	Route string `json:"r"`
	// Capacity is the bucket size (burst).
	Capacity int64 `json:"c"`
	// RefillTokens tokens are added every RefillPeriodMs milliseconds.
	RefillTokens int64 `json:"n"`
	// RefillPeriodMs is the refill period in milliseconds.
	RefillPeriodMs int64 `json:"p"`
	// Shadow rules never reject; they only report what they would reject.
	Shadow bool `json:"sh,omitempty"`
	// FailureMode is what to do when Redis cannot decide.
	FailureMode FailureMode `json:"f,omitempty"`
	// Prefetch is the compiled spec.hotKey.prefetch.
	Prefetch PrefetchMode `json:"pm,omitempty"`
	// QuotaPeriod is the period of the quota (QuotaLimit, QuotaZone); 0:
	// no quota.
	QuotaPeriod QuotaPeriod `json:"qp,omitempty"`
	// Batch is the Fixed batch, or the largest Auto batch (0: the default).
	Batch int32 `json:"pb,omitempty"`
	// ErrorBudgetPercent bounds Auto batches (0: the default, 5).
	ErrorBudgetPercent int32 `json:"pe,omitempty"`
	// Shards is the number of sub-buckets (0 and 1: not sharded).
	Shards int32 `json:"k,omitempty"`
	// MaxInFlight caps the requests in flight cluster-wide (0: no cap).
	MaxInFlight int32 `json:"mi,omitempty"`
	// RegionsFixed is spec.regionSplit Fixed: the shares never follow the
	// traffic, and the gateways record no demand for the rule.
	RegionsFixed bool `json:"rf,omitempty"`
	// Shared is spec.shared: one bucket for every request the rule
	// matches.
	Shared bool `json:"sd,omitempty"`
	// Regions split the limit between regions; their percentages add up to
	// 100, or less in the middle of a change of the shares (the region
	// rebalancer lowers the shrinking shares before it raises the growing
	// ones).
	Regions []RegionShare `json:"rg,omitempty"`
	// MaxInFlightLeaseMs is the lease of a concurrency slot (0: the
	// default, DefaultLeaseMs).
	MaxInFlightLeaseMs int64 `json:"mil,omitempty"`
	// Cost is the compiled spec.cost; nil: every request costs one token.
	Cost *Cost `json:"co,omitempty"`
	// QuotaLimit tokens may be spent per QuotaPeriod in the time zone
	// QuotaZone (an IANA name).
	QuotaLimit int64  `json:"ql,omitempty"`
	QuotaZone  string `json:"qz,omitempty"`
	// Claims is the compiled spec.match.claims, sorted by path: the rule
	// (of tenant "*") applies only to requests whose identity carries
	// them. See Set.LookupClaims for its precedence.
	Claims []ClaimMatch `json:"cl,omitempty"`
	// By is the compiled spec.by: what the rule's buckets are keyed by,
	// in order; empty for the default kind (tenant and route).
	By []KeyPart `json:"by,omitempty"`
	// Source names the RateLimitRule this was compiled from ("namespace/name");
	// empty for built-in rules.
	Source string `json:"s,omitempty"`

	// named holds Kind, KindID, Identity and Name, computed when the rule
	// goes into a shard (cacheKind); nil for the default kind, which most
	// rules are (a pointer: 8 bytes a rule instead of four strings).
	named *ruleNames
}

// ruleNames are a rule's Kind, KindID, Identity and Name, computed once.
type ruleNames struct{ kind, kindID, identity, name string }

// PrefetchMode is the compiled spec.hotKey.prefetch.
type PrefetchMode uint8

const (
	// PrefetchOff: one Redis decision per request.
	PrefetchOff PrefetchMode = iota
	// PrefetchFixed: batches of Batch tokens.
	PrefetchFixed
	// PrefetchAuto: batches sized from rate, replicas and error budget.
	PrefetchAuto
)

// RegionShare is one region's percentage of a rule.
type RegionShare struct {
	Name    string `json:"n"`
	Percent int32  `json:"p"`
}

// FollowsTraffic reports whether the rule's region shares follow the
// traffic: it is split between two regions or more and not Fixed (one
// region holds all of it: nothing to move). Its gateways record demand;
// the controller's rebalancer moves its shares under the same condition.
func (r *Rule) FollowsTraffic() bool {
	return len(r.Regions) > 1 && !r.RegionsFixed
}

// Defaults and bounds of the hot-key settings; they match the CRD schema.
const (
	DefaultErrorBudgetPercent = 5
	DefaultAutoBatch          = 1000
	MaxBatch                  = 10000
	MaxBucketShards           = 64
	MaxRegions                = 16
)

// Share returns the percentage of region in the rule, and false when the rule
// is not split or does not list region.
func (r *Rule) Share(region string) (int32, bool) {
	if region == "" {
		return 0, false
	}
	for _, g := range r.Regions {
		if g.Name == region {
			return g.Percent, true
		}
	}
	return 0, false
}

// RegionCapacity is the capacity region enforces: the rule's, or its share
// of it when the rule is split between regions and lists region.
func (r *Rule) RegionCapacity(region string) float64 {
	if pct, ok := r.Share(region); ok {
		return float64(r.Capacity) * float64(pct) / 100
	}
	return float64(r.Capacity)
}

// RegionRefill is the refill region enforces, as RefillTokens per
// RefillPeriodMs are: the rule's, or its share of it (tokens×percent per
// period×100, exact) when the rule is split and lists region.
func (r *Rule) RegionRefill(region string) (tokens, periodMs int64) {
	if pct, ok := r.Share(region); ok {
		return r.RefillTokens * int64(pct), r.RefillPeriodMs * 100
	}
	return r.RefillTokens, r.RefillPeriodMs
}

// FailureMode is the compiled spec.failureMode.
type FailureMode uint8

const (
	// LocalFallback limits locally with the rule divided by the replica count.
	LocalFallback FailureMode = iota
	// FailOpen admits every request.
	FailOpen
	// FailClosed rejects every request.
	FailClosed
)

func (f FailureMode) String() string {
	switch f {
	case LocalFallback:
		return "LocalFallback"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(f))
}

// Limits on compiled values; they match the CRD schema.
const (
	MaxCapacity     = 1_000_000_000
	MaxRefillTokens = 1_000_000_000
	MinPeriodMs     = 1_000
	MaxPeriodMs     = 168 * 3600 * 1000
)

// Validate checks a rule read from an untrusted source (a ConfigMap anyone
// with write access could have edited, a manifest file).
func (r *Rule) Validate() error {
	switch {
	case !v1alpha1.ValidSelector(r.Tenant):
		return fmt.Errorf("tenant %q is not a valid id or %q", clip.String(r.Tenant), v1alpha1.Wildcard)
	case !v1alpha1.ValidSelector(r.Route):
		return fmt.Errorf("route %q is not a valid id or %q", clip.String(r.Route), v1alpha1.Wildcard)
	case r.Capacity < 1 || r.Capacity > MaxCapacity:
		return fmt.Errorf("rule %s/%s: capacity %d out of range [1, %d]", r.Tenant, r.Route, r.Capacity, MaxCapacity)
	case r.RefillTokens < 1 || r.RefillTokens > MaxRefillTokens:
		return fmt.Errorf("rule %s/%s: refill tokens %d out of range [1, %d]", r.Tenant, r.Route, r.RefillTokens, MaxRefillTokens)
	case r.RefillPeriodMs < MinPeriodMs || r.RefillPeriodMs > MaxPeriodMs:
		return fmt.Errorf("rule %s/%s: refill period %dms out of range [%d, %d]", r.Tenant, r.Route, r.RefillPeriodMs, MinPeriodMs, MaxPeriodMs)
	case r.FailureMode > FailClosed:
		return fmt.Errorf("rule %s/%s: unknown failure mode %d", r.Tenant, r.Route, r.FailureMode)
	}
	if err := r.validateCost(); err != nil {
		return err
	}
	if err := r.validateHotKey(); err != nil {
		return err
	}
	if err := r.validateConcurrency(); err != nil {
		return err
	}
	if err := r.validateClaims(); err != nil {
		return err
	}
	if err := r.validateBy(); err != nil {
		return err
	}
	return r.validateQuota()
}

// Bounds and default of spec.concurrency; they match the CRD schema.
const (
	MaxMaxInFlight = 100_000
	DefaultLeaseMs = 10_000
	MinLeaseMs     = 1_000
	MaxLeaseMs     = 3600 * 1000
)

func (r *Rule) validateConcurrency() error {
	switch {
	case r.MaxInFlight < 0 || r.MaxInFlight > MaxMaxInFlight:
		return fmt.Errorf("rule %s/%s: maxInFlight %d out of range [1, %d]", r.Tenant, r.Route, r.MaxInFlight, MaxMaxInFlight)
	case r.MaxInFlightLeaseMs != 0 && (r.MaxInFlightLeaseMs < MinLeaseMs || r.MaxInFlightLeaseMs > MaxLeaseMs):
		return fmt.Errorf("rule %s/%s: concurrency lease %dms out of range [%d, %d]", r.Tenant, r.Route, r.MaxInFlightLeaseMs, MinLeaseMs, MaxLeaseMs)
	case r.MaxInFlightLeaseMs != 0 && r.MaxInFlight == 0:
		return fmt.Errorf("rule %s/%s: a concurrency lease without maxInFlight", r.Tenant, r.Route)
	}
	for _, g := range r.Regions {
		if r.MaxInFlight > 0 && int64(r.MaxInFlight)*int64(g.Percent) < 100 {
			return fmt.Errorf("rule %s/%s: region %q gets %d%% of maxInFlight %d, less than one request",
				r.Tenant, r.Route, clip.String(g.Name), g.Percent, r.MaxInFlight)
		}
	}
	return nil
}

// InFlightLimit is the number of requests in flight region may hold under
// the rule: MaxInFlight, or its region's share of it (rounded down, at least
// 1) when the rule is split and lists region. 0: no cap.
func (r *Rule) InFlightLimit(region string) int64 {
	if r.MaxInFlight <= 0 {
		return 0
	}
	if pct, ok := r.Share(region); ok {
		return max(1, int64(r.MaxInFlight)*int64(pct)/100)
	}
	return int64(r.MaxInFlight)
}

// Lease is the lease of a concurrency slot.
func (r *Rule) Lease() time.Duration {
	if r.MaxInFlightLeaseMs <= 0 {
		return DefaultLeaseMs * time.Millisecond
	}
	return time.Duration(r.MaxInFlightLeaseMs) * time.Millisecond
}

func (r *Rule) validateHotKey() error {
	switch {
	case r.Prefetch > PrefetchAuto:
		return fmt.Errorf("rule %s/%s: unknown prefetch mode %d", r.Tenant, r.Route, r.Prefetch)
	case r.Batch != 0 && (r.Batch < 2 || r.Batch > MaxBatch):
		return fmt.Errorf("rule %s/%s: batch %d out of range [2, %d]", r.Tenant, r.Route, r.Batch, MaxBatch)
	case r.Prefetch == PrefetchFixed && r.Batch == 0:
		return fmt.Errorf("rule %s/%s: prefetch Fixed needs a batch", r.Tenant, r.Route)
	case r.ErrorBudgetPercent < 0 || r.ErrorBudgetPercent > 50:
		return fmt.Errorf("rule %s/%s: error budget %d%% out of range [1, 50]", r.Tenant, r.Route, r.ErrorBudgetPercent)
	case r.Shards < 0 || r.Shards > MaxBucketShards:
		return fmt.Errorf("rule %s/%s: shards %d out of range [1, %d]", r.Tenant, r.Route, r.Shards, MaxBucketShards)
	case int64(r.Shards) > r.Capacity:
		return fmt.Errorf("rule %s/%s: capacity %d is less than shards %d", r.Tenant, r.Route, r.Capacity, r.Shards)
	case len(r.Regions) > MaxRegions:
		return fmt.Errorf("rule %s/%s: %d regions, at most %d", r.Tenant, r.Route, len(r.Regions), MaxRegions)
	}
	if len(r.Regions) == 0 {
		return nil
	}
	var sum int32
	seen := map[string]bool{}
	for _, g := range r.Regions {
		if !ValidRegion(g.Name) || seen[g.Name] || g.Percent < 1 || g.Percent > 100 {
			return fmt.Errorf("rule %s/%s: region %q with %d%% is invalid or listed twice", r.Tenant, r.Route, clip.String(g.Name), g.Percent)
		}
		seen[g.Name] = true
		sum += g.Percent
		// A share below one token per shard could never admit a request.
		if r.Capacity*int64(g.Percent) < 100*int64(max(1, r.Shards)) {
			return fmt.Errorf("rule %s/%s: region %q gets %d%% of capacity %d, less than one token per shard (%d shards)",
				r.Tenant, r.Route, clip.String(g.Name), g.Percent, r.Capacity, max(1, r.Shards))
		}
	}
	// Less than 100 in the middle of a change of the shares (the
	// rebalancer lowers shares before it raises others), never more.
	if sum > 100 {
		return fmt.Errorf("rule %s/%s: region percentages add up to %d, more than 100", r.Tenant, r.Route, sum)
	}
	return nil
}

// compileRegions compiles spec.regions and spec.regionSplit.
func (r *Rule) compileRegions(spec *v1alpha1.RateLimitRuleSpec, source string) error {
	for _, g := range spec.Regions {
		r.Regions = append(r.Regions, RegionShare{Name: g.Name, Percent: g.Percent})
	}
	r.RegionsFixed = spec.RegionSplit == v1alpha1.RegionSplitFixed
	if sum := r.regionSum(); len(r.Regions) > 0 && sum != 100 {
		// A snapshot may hold less (a change of the shares in progress);
		// a spec's split is whole.
		return fmt.Errorf("%s: spec.regions: region percentages add up to %d, not 100", source, sum)
	}
	return nil
}

// regionSum is the sum of the region percentages.
func (r *Rule) regionSum() int32 {
	var sum int32
	for _, g := range r.Regions {
		sum += g.Percent
	}
	return sum
}

// ValidRegion reports whether s is a valid region name: 1 to 32 characters
// of a-z, 0-9 and '-', starting and ending with a letter or digit.
func ValidRegion(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// RegionQuota is the quota region enforces: the rule's, or its share of it
// (floored, at least 1) when the rule is split and lists region.
func (r *Rule) RegionQuota(region string) int64 {
	if pct, ok := r.Share(region); ok {
		return max(1, r.QuotaLimit*int64(pct)/100)
	}
	return r.QuotaLimit
}

// RatePerSecond is the refill rate in tokens per second.
func (r *Rule) RatePerSecond() float64 {
	return float64(r.RefillTokens) * 1000 / float64(r.RefillPeriodMs)
}

// Period is the refill period.
func (r *Rule) Period() time.Duration {
	return time.Duration(r.RefillPeriodMs) * time.Millisecond
}

// The spec's enumerations (empty: the default) and what they compile to.
var (
	specModes = map[v1alpha1.Mode]bool{"": false, v1alpha1.ModeEnforce: false, v1alpha1.ModeShadow: true}

	specFailureModes = map[v1alpha1.FailureMode]FailureMode{
		"": LocalFallback, v1alpha1.FailureLocalFallback: LocalFallback, v1alpha1.FailureOpen: FailOpen, v1alpha1.FailureClosed: FailClosed,
	}
	specPrefetchModes = map[v1alpha1.PrefetchMode]PrefetchMode{
		"": PrefetchOff, v1alpha1.PrefetchOff: PrefetchOff, v1alpha1.PrefetchFixed: PrefetchFixed, v1alpha1.PrefetchAuto: PrefetchAuto,
	}
)

// FromSpec compiles a RateLimitRule's spec. source names the object.
func FromSpec(spec *v1alpha1.RateLimitRuleSpec, source string) (Rule, error) {
	if spec.TargetRef != nil {
		// The controller resolves targetRef into route ids (one per HTTPRoute
		// rule) before compiling; a routes file has no HTTPRoutes.
		return Rule{}, fmt.Errorf("%s: spec.targetRef names an HTTPRoute, which only the controller in Gateway API mode resolves; use spec.route with a routes file", source)
	}
	tokens, period, ok := spec.RefillRate()
	if !ok {
		return Rule{}, fmt.Errorf("%s: exactly one of spec.refillPerSecond and spec.refill must be set", source)
	}
	r := Rule{
		Tenant: spec.Tenant, Route: spec.Route, Capacity: spec.Capacity,
		RefillTokens: tokens, RefillPeriodMs: period.Milliseconds(), Source: source, Shared: spec.Shared,
	}
	if err := r.compileCallers(spec, source); err != nil {
		return Rule{}, err
	}
	shadow, ok := specModes[spec.Mode]
	if !ok {
		return Rule{}, fmt.Errorf("%s: spec.mode %q: want Enforce or Shadow", source, spec.Mode)
	}
	r.Shadow = shadow
	if r.FailureMode, ok = specFailureModes[spec.FailureMode]; !ok {
		return Rule{}, fmt.Errorf("%s: spec.failureMode %q: want LocalFallback, FailOpen or FailClosed", source, spec.FailureMode)
	}
	if hk := spec.HotKey; hk != nil {
		if r.Prefetch, ok = specPrefetchModes[hk.Prefetch]; !ok {
			return Rule{}, fmt.Errorf("%s: spec.hotKey.prefetch %q: want Off, Fixed or Auto", source, hk.Prefetch)
		}
		if hk.Batch != nil {
			r.Batch = *hk.Batch
		}
		r.ErrorBudgetPercent = hk.ErrorBudgetPercent
		if hk.Shards > 1 {
			r.Shards = hk.Shards
		}
	}
	r.Cost = costFromSpec(spec.Cost, spec.Capacity)
	if err := r.compileRegions(spec, source); err != nil {
		return Rule{}, err
	}
	if c := spec.Concurrency; c != nil {
		if c.MaxInFlight < 1 {
			return Rule{}, fmt.Errorf("%s: spec.concurrency.maxInFlight %d: want 1 to %d", source, c.MaxInFlight, MaxMaxInFlight)
		}
		r.MaxInFlight = c.MaxInFlight
		r.MaxInFlightLeaseMs = int64(c.LeaseSeconds) * 1000
	}
	if err := r.compileQuota(spec.Quota, source); err != nil {
		return Rule{}, err
	}
	if err := r.validateCompiled(); err != nil {
		return Rule{}, fmt.Errorf("%s: %w", source, err)
	}
	return r, nil
}

// compileCallers compiles who the rule applies to and keys its buckets
// by: spec.match.claims and spec.by.
func (r *Rule) compileCallers(spec *v1alpha1.RateLimitRuleSpec, source string) error {
	var err error
	if r.Claims, err = claimsFromSpec(spec.Match, source); err != nil {
		return err
	}
	r.By, err = byFromSpec(spec, source)
	return err
}

// validateCompiled is Validate and the schema's bound on the refill time
// (v1alpha1.MaxRefillSeconds), for a rule compiled from a spec: a rule
// file, or an object stored before the schema had the bound. The bound is
// not in Validate: a shard published by an older controller may hold such
// a rule, which this gateway's scripts handle, and a shard refused would
// keep every rule in it stale.
func (r *Rule) validateCompiled() error {
	if err := r.Validate(); err != nil {
		return err
	}
	if s := r.FullRefillSeconds(); s > v1alpha1.MaxRefillSeconds {
		return fmt.Errorf("rule %s/%s: %s (this one: %d seconds)", r.Tenant, r.Route, v1alpha1.MessageRefillTooSlow, s)
	}
	return nil
}

// FullRefillSeconds is the time the rule's bucket takes to refill from its
// lowest (empty, or -MaxDebt with a response cost) to full, in whole
// seconds, as the schema computes it: (capacity + maxDebt) x period /
// tokens. A region's share and a shard divide capacity and rate alike, so
// this is the time of each of their buckets too. The rule's fields must be
// within their ranges (Validate).
func (r *Rule) FullRefillSeconds() int64 {
	low := r.Capacity
	if r.Cost != nil && r.Cost.Response != nil {
		low += r.Cost.Response.MaxDebt
	}
	return low * r.RefillPeriodMs / 1000 / r.RefillTokens
}
