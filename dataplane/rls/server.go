// Package rls serves Envoy's rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), so Envoy,
// Istio and other Envoy-based gateways can use tollgate as their global rate
// limit service. It decides through the same decision engine as the HTTP
// proxy: the same rules, Redis script, fallback, prefetch and metrics.
//
// A request's domain selects how its descriptors map to a tenant and a route
// (Domains, Domains.Map); every descriptor is one decision, for its tenant
// and route, of its hits_addend tokens. The overall code is OVER_LIMIT when
// any descriptor is. As in Envoy's reference service, every descriptor is
// decided, so the ones before an over-limit descriptor still take their
// tokens.
package rls

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/limitheaders"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// logInterval bounds the logs of refused requests and limiter errors: at
// most one line per message per interval.
const logInterval = 10 * time.Second

// Decider makes one rate limit decision; decision.Engine implements it.
type Decider interface {
	Decide(ctx context.Context, tenant, route string, cost int64) (decision.Decision, *snapshot.Rule, error)
	// Rule is the rule of the default kind in force for tenant on route.
	Rule(tenant, route string) *snapshot.Rule
	// Limits are the limits of req when rules of other kinds (spec.by,
	// spec.shared) apply to it; nil when primary alone does.
	Limits(req decision.Request, primary *snapshot.Rule) ([]decision.Limit, error)
	// DecideStack decides limits in order; a refusal gives back what the
	// limits before it took.
	DecideStack(ctx context.Context, req decision.Request, limits []decision.Limit, costs []int64) (decision.Stacked, error)
}

// Charger charges a cost after a response, into debt if need be;
// decision.Engine implements it. A Decider without it refuses charges
// (ChargeKey) with codes.Unimplemented.
type Charger interface {
	Charge(ctx context.Context, tenant, route string, rule *snapshot.Rule, cost int64) limiter.Charged
}

// Options configure a Server. Decider is required.
type Options struct {
	// Decider decides for a tenant and route; over a limiter.Chain (which
	// applies each rule's failure mode when Redis cannot decide) it never
	// returns errors.
	Decider Decider
	// Domains returns the current domain configuration; called once per
	// request. nil, or a nil or empty result, maps every domain with the
	// default keys "tenant" and "route".
	Domains func() *Domains
	// Region is the gateway's region (--region): a rule split between
	// regions is reported at this region's share.
	Region string
	// Metrics, if set, counts decisions in tollgate_gateway_decisions_total
	// with route label "rls:<domain>" for configured domains and "rls"
	// without a domain configuration: never a tenant or descriptor value.
	Metrics *metrics.Gateway
	// IETFHeaders adds the IETF RateLimit and RateLimit-Policy headers.
	IETFHeaders bool
	// Logger receives rate-limited logs of refused requests and limiter
	// errors.
	Logger logr.Logger
}

// Server implements rlsv3.RateLimitServiceServer. Safe for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts     Options
	log      *ratelog.Logger
	counters sync.Map // route label → *metrics.DecisionCounters
	// unenforced holds the rules with spec.concurrency already logged as
	// not enforced here (see noteUnenforced).
	unenforced sync.Map // "source tenant route" → struct{}
}

// New returns a Server.
func New(opts Options) *Server {
	return &Server{opts: opts, log: ratelog.New(opts.Logger, logInterval)}
}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// decided is one descriptor's decision.
type decided struct {
	t    Target
	d    decision.Decision
	rule *snapshot.Rule
	// stack is set when several limits decided (spec.by, spec.shared):
	// d and rule are then the binding limit's.
	stack *decision.Stacked
	// unlimited: an anonymous descriptor no rule limits (OK, no limit to
	// report).
	unlimited bool
	over      bool // enforced rejection: OVER_LIMIT
	shadow    bool // a Shadow rule would have rejected
}

// ShouldRateLimit decides every descriptor of req. A malformed request is
// refused whole with codes.InvalidArgument before any decision; a limiter
// error (only without a failure mode underneath) is codes.Unavailable, which
// Envoy treats according to its failure_mode_deny.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	var ds *Domains
	if s.opts.Domains != nil {
		ds = s.opts.Domains()
	}
	var buf [1]Target
	targets, dom, err := ds.AppendTargets(buf[:0], req)
	if err != nil {
		s.log.Info("refused an invalid rate limit request", "error", err.Error())
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var one [1]decided
	results := one[:0]
	if len(targets) > 1 {
		results = make([]decided, 0, len(targets))
	}
	counters := s.countersFor(dom.label)
	for _, t := range targets {
		r, err := s.decideAll(ctx, t)
		if c := status.Code(err); c == codes.Unimplemented || c == codes.InvalidArgument {
			return nil, err
		}
		if err != nil {
			s.log.Error(err, "limiter failed", "route", dom.label)
			return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
		}
		if r.unlimited {
			counters.Inc(metrics.Allowed, int(limiter.SourceRedis))
			results = append(results, r)
			continue
		}
		d, rule := r.d, r.rule
		if rule == nil {
			return nil, status.Error(codes.Internal, "no rule for a decision")
		}
		if rule.MaxInFlight > 0 {
			s.noteUnenforced(rule)
		}
		result := metrics.Allowed
		switch {
		case d.Allowed:
		case r.stack != nil && r.stack.Refused:
			r.over, result = true, metrics.Rejected
		case rule.Shadow || r.stack != nil && r.stack.Shadowed:
			r.shadow, result = true, metrics.ShadowRejected
		default:
			r.over, result = true, metrics.Rejected
		}
		counters.Inc(result, int(d.Source))
		results = append(results, r)
	}
	return s.response(results), nil
}

// decideAll decides for one target: under the default kind's rule alone
// (decide), or, when rules of other kinds apply to it, under every limit
// in order (a refusal gives back what the limits before it took), the
// descriptor then described by the binding limit. An anonymous target
// (Domain.TenantOptional) no rule limits is unlimited.
func (s *Server) decideAll(ctx context.Context, t Target) (decided, error) {
	r := decided{t: t}
	var primary *snapshot.Rule
	if t.Tenant != "" && !t.Charge {
		primary = s.opts.Decider.Rule(t.Tenant, t.Route)
	}
	var limits []decision.Limit
	req := decision.Request{Tenant: t.Tenant, Route: t.Route, Addr: t.Addr, Method: t.Method, Path: t.Path, Header: t.Header}
	if !t.Charge {
		var err error
		if limits, err = s.opts.Decider.Limits(req, primary); err != nil {
			return r, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if limits == nil {
		if t.Tenant == "" {
			r.unlimited = true
			return r, nil
		}
		var err error
		r.d, r.rule, err = s.decide(ctx, t)
		return r, err
	}
	costs := make([]int64, len(limits))
	for i := range costs {
		costs[i] = t.Cost
	}
	st, err := s.opts.Decider.DecideStack(ctx, req, limits, costs)
	if err != nil {
		return r, err
	}
	r.stack = &st
	r.d, r.rule, _ = st.Bound()
	return r, nil
}

// decide decides for one target: a decision, or a charge (always
// admitted: the response it is for was served).
func (s *Server) decide(ctx context.Context, t Target) (decision.Decision, *snapshot.Rule, error) {
	if !t.Charge {
		return s.opts.Decider.Decide(ctx, t.Tenant, t.Route, t.Cost)
	}
	c, ok := s.opts.Decider.(Charger)
	if !ok {
		return decision.Decision{}, nil, status.Error(codes.Unimplemented, "this rate limit service cannot charge")
	}
	rule := s.opts.Decider.Rule(t.Tenant, t.Route)
	ch := c.Charge(ctx, t.Tenant, t.Route, rule, t.Cost)
	limit := max(1, int64(rule.RegionCapacity(s.opts.Region)))
	return decision.Decision{Outcome: limiter.Outcome{Allowed: true, Remaining: max(0, ch.Remaining), Source: ch.Source}, Limit: limit}, rule, nil
}

// answer is a response with room for the parts of one descriptor's status
// and its headers: one allocation where a message per part would be eight
// to eleven. Larger requests allocate their statuses' parts per request.
type answer struct {
	res      rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	parts    [1]statusParts
	headers  [maxHeaders]*corev3.HeaderValue
	values   [maxHeaders]corev3.HeaderValue
}

// statusParts are the messages of one descriptor's status.
type statusParts struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// maxHeaders is the number of headers a response can carry: the limit,
// remaining, two IETF headers, Retry-After and the shadow header.
const maxHeaders = 6

// newAnswer returns an OK response with room for n descriptors' statuses,
// and the parts to build them in.
func newAnswer(n int) (*answer, []statusParts) {
	a := new(answer)
	a.res.OverallCode = rlsv3.RateLimitResponse_OK
	a.res.Statuses = a.statuses[:]
	if n > 1 {
		a.res.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
		return a, make([]statusParts, n)
	}
	return a, a.parts[:]
}

// response builds the answer from the decisions.
func (s *Server) response(results []decided) *rlsv3.RateLimitResponse {
	a, parts := newAnswer(len(results))
	res := &a.res
	var (
		tightest   = -1  // the most constrained descriptor
		retry      int64 // the largest Retry-After of over-limit descriptors
		retryNever bool  // an over-limit descriptor can never pass
		shadow     bool
	)
	for i := range results {
		r := &results[i]
		code := rlsv3.RateLimitResponse_OK
		if r.over {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
			res.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if sec, ok := limitheaders.RetryAfterSeconds(r.d); ok {
				retry = max(retry, sec)
			} else {
				retryNever = true
			}
		}
		shadow = shadow || r.shadow
		res.Statuses[i] = s.descriptorStatus(r, code, &parts[i])
		if tightest < 0 || tighter(r, &results[tightest]) {
			tightest = i
		}
	}

	t := &results[tightest]
	if t.unlimited {
		return res // every descriptor anonymous and unlimited: no limit to report
	}
	remaining := limitheaders.RemainingOf(t.d)
	if res.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		remaining = 0
	}
	hs := a.headers[:0]
	add := func(k, v string) {
		h := &a.values[len(hs)]
		h.Key, h.Value = k, v
		hs = append(hs, h)
	}
	add(limitheaders.Limit, strconv.FormatInt(limitheaders.LimitOf(t.d), 10))
	add(limitheaders.Remaining, strconv.FormatInt(remaining, 10))
	if s.opts.IETFHeaders {
		policy, state := ietfHeaders(results)
		add(limitheaders.IETFPolicy, policy)
		add(limitheaders.IETF, state)
	}
	if res.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && !retryNever {
		add(limitheaders.RetryAfter, strconv.FormatInt(retry, 10))
	}
	if shadow {
		add(limitheaders.Shadow, limitheaders.WouldReject)
	}
	res.ResponseHeadersToAdd = hs
	return res
}

// ietfHeaders are the values of the IETF RateLimit-Policy and RateLimit
// headers: the items of every descriptor (its bucket, and its calendar
// quota if the rule has one).
func ietfHeaders(results []decided) (policy, state string) {
	items := make([]limitheaders.Item, 0, len(results))
	for i := range results {
		r := &results[i]
		switch {
		case r.unlimited:
		case r.stack != nil:
			for j, d := range r.stack.Decisions {
				l := r.stack.Limits[j]
				items = append(items, limitheaders.Items(l.Name, l.Rule, d)...)
			}
		default:
			items = append(items, limitheaders.Items(r.t.Route, r.rule, r.d)...)
		}
	}
	return limitheaders.FormatPolicy(items), limitheaders.FormatState(items)
}

// descriptorStatus is one descriptor's status. It describes the limit that
// binds (limitheaders.QuotaBinds): the token bucket (its refill rate as
// current_limit, its remaining tokens, the time until it is full), or, when
// the calendar quota refused the request or has fewer tokens left, the
// quota (its limit per DAY, WEEK or MONTH, what is left in the period, the
// time until the period ends). It is built in p.
func (s *Server) descriptorStatus(r *decided, code rlsv3.RateLimitResponse_Code, p *statusParts) *rlsv3.RateLimitResponse_DescriptorStatus {
	if r.unlimited {
		p.status.Code = code
		return &p.status
	}
	st, limit := &p.status, &p.limit
	st.Code, st.CurrentLimit, st.DurationUntilReset = code, limit, &p.reset
	if limitheaders.QuotaBinds(r.d) {
		left := r.d.Quota.Remaining
		if r.d.Quota.Refused {
			left = 0
		}
		limit.Name = r.t.Route + "-" + r.rule.QuotaPeriod.Adjective()
		limit.RequestsPerUnit, limit.Unit = clampUint32(r.d.QuotaLimit), quotaUnits[r.rule.QuotaPeriod]
		st.LimitRemaining = clampUint32(left)
		setDuration(&p.reset, r.d.Quota.ResetAfter)
		return st
	}
	tokens, period := r.rule.RegionRefill(s.opts.Region)
	limit.Name = r.rule.Name(r.t.Route)
	limit.RequestsPerUnit, limit.Unit = RateUnit(tokens, period)
	st.LimitRemaining = clampUint32(limitheaders.RemainingOf(r.d))
	setDuration(&p.reset, r.d.ResetAfter)
	return st
}

// setDuration sets dst to d (0 if negative), as durationpb.New would.
func setDuration(dst *durationpb.Duration, d time.Duration) {
	d = max(0, d)
	dst.Seconds = int64(d / time.Second)
	dst.Nanos = int32(d % time.Second)
}

// quotaUnits are the units of Envoy's RateLimit for quota periods.
var quotaUnits = map[snapshot.QuotaPeriod]rlsv3.RateLimitResponse_RateLimit_Unit{
	snapshot.QuotaDay: rlsv3.RateLimitResponse_RateLimit_DAY, snapshot.QuotaWeek: rlsv3.RateLimitResponse_RateLimit_WEEK,
	snapshot.QuotaMonth: rlsv3.RateLimitResponse_RateLimit_MONTH,
}

// tighter reports whether a constrains the request more than b: over the
// limit first, then fewer tokens left, then the smaller limit.
func tighter(a, b *decided) bool {
	if a.unlimited != b.unlimited {
		return b.unlimited
	}
	if a.over != b.over {
		return a.over
	}
	ra, rb := limitheaders.RemainingOf(a.d), limitheaders.RemainingOf(b.d)
	if ra != rb {
		return ra < rb
	}
	return a.d.Limit < b.d.Limit
}

func clampUint32(v int64) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}

// numSources is the number of limiter.Source values.
const numSources = int(limiter.SourceFailClosed) + 1

// countersFor returns the counters of a route label; nil without metrics.
// Labels come only from the domain configuration, so their number is
// bounded.
func (s *Server) countersFor(label string) *metrics.DecisionCounters {
	if s.opts.Metrics == nil {
		return nil
	}
	if c, ok := s.counters.Load(label); ok {
		return c.(*metrics.DecisionCounters)
	}
	c := s.opts.Metrics.DecisionCounters(label, numSources, func(i int) string { return limiter.Source(i).String() })
	actual, _ := s.counters.LoadOrStore(label, c)
	return actual.(*metrics.DecisionCounters)
}

// noteUnenforced counts a decision under a rule with spec.concurrency and
// logs the rule once: Envoy's rate limit protocol has no signal for the end
// of a request, so the service cannot release a concurrency slot, and only
// the rule's token bucket decides here. (Envoy's apply_on_stream_done sends
// a second, fire-and-forget ShouldRateLimit at stream end; it is neither
// guaranteed to arrive nor renewable for a long request, so a slot taken on
// its promise would leak or expire mid-request.)
func (s *Server) noteUnenforced(rule *snapshot.Rule) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.ConcurrencyUnenforced.Inc()
	}
	key := rule.Source + " " + rule.Tenant + " " + rule.Route
	if _, seen := s.unenforced.LoadOrStore(key, struct{}{}); !seen {
		s.opts.Logger.Info("the rate limit service does not enforce spec.concurrency (Envoy sends no end-of-request signal); only the token bucket decides",
			"rule", rule.Source, "tenant", rule.Tenant, "route", rule.Route, "maxInFlight", rule.MaxInFlight)
	}
}
