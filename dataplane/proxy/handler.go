// Package proxy is the gateway's HTTP path: match a route, identify the
// tenant, look up its rule, ask the limiter, then forward the request
// upstream or answer 429.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/clientaddr"
	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/httpguard"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Options are the Handler's collaborators. All are required but Logger.
type Options struct {
	// Router returns the route table in force: the routes file's
	// (routes.Table) or, in Gateway API mode, the controller's compiled
	// HTTPRoutes (httproutes.Table). Called once per request.
	Router func() routing.Router
	// Decider decides for a tenant and route; over a limiter.Chain (which
	// applies each rule's failure mode when Redis cannot decide) it never
	// returns errors.
	Decider Decider
	// Identity turns an API key into a tenant id; used when Chain is nil.
	Identity identity.Resolver
	// Chain, when set, identifies requests instead (API keys and bearer
	// tokens, --identity=mapped,jwt).
	Chain *identity.Chain
	// JWT, when set, counts refused bearer tokens by reason.
	JWT *metrics.JWT
	// Metrics records decisions and responses.
	Metrics *metrics.Gateway
	// IETFHeaders adds the IETF RateLimit and RateLimit-Policy headers next to
	// X-RateLimit-Limit and X-RateLimit-Remaining.
	IETFHeaders bool
	// Logger receives rate-limited logs of upstream and limiter errors.
	Logger logr.Logger
	// UpstreamTimeout is the response-header timeout of routes without a
	// timeout of their own (answered 504). Zero means none.
	UpstreamTimeout time.Duration
	// Failures limits failed identifications per client address; nil
	// limits nothing.
	Failures *identity.FailureLimiter
	// ClientAddr finds a request's client address (--trusted-proxies),
	// which keys the failure throttle and the rules keyed by
	// clientAddress; nil trusts no proxy: the TCP peer.
	ClientAddr *clientaddr.Resolver
	// Slots holds the concurrency slots of rules with spec.concurrency; nil
	// enforces no concurrency limit.
	Slots *concurrency.Slots
	// Region is this gateway's region (--region): a rule split between
	// regions caps concurrency at the region's share.
	Region string
	// ClientBodyTimeout bounds the time a client takes to send a request
	// body, from the start of the handler; a body still unfinished then is
	// answered 408 and the connection closed. Zero means no bound.
	ClientBodyTimeout time.Duration
	// TenantHeader is the request header in which an upstream learns the
	// tenant of a forwarded request (CheckTenantHeader says which names
	// are refused); "" means DefaultTenantHeader. The gateway owns it: a
	// client's copy is removed from every request.
	TenantHeader string
	// DrainBytes bounds what the gateway reads of an answer under a
	// response-cost rule after its client left, to find its cost (as well
	// as the route's timeout); MaxDrains bounds the answers read so at
	// once. Zero for either reads nothing after the client left: it is
	// charged onClientGone at once (DefaultDrainBytes, DefaultMaxDrains:
	// the gateway's defaults).
	DrainBytes int64
	MaxDrains  int
}

// Decider makes the rate limit decision of one request, and charges a
// response's cost after it; decision.Engine implements it.
type Decider interface {
	// RuleFor is the rule in force for tenant on route (never nil), for
	// an identity that carries claims (nil: none).
	RuleFor(tenant, route string, claims snapshot.Claims) *snapshot.Rule
	// DecideRule takes cost tokens for tenant on route under rule.
	DecideRule(ctx context.Context, tenant, route string, rule *snapshot.Rule, cost int64) (decision.Decision, error)
	// Charge charges a response's cost, into debt if need be.
	Charge(ctx context.Context, tenant, route string, rule *snapshot.Rule, cost int64) limiter.Charged
	// Refund gives back what decision d took, for a request refused
	// after it (a concurrency slot), and returns d as the refund left it;
	// an error says it stays spent.
	Refund(ctx context.Context, tenant, route string, rule *snapshot.Rule, d decision.Decision) (decision.Decision, error)
	// Limits are the limits of req when rules of kinds other than the
	// default apply to it (primary first, when not nil); nil when primary
	// alone limits it. An error is a decision.HeaderError (400).
	Limits(req decision.Request, primary *snapshot.Rule) ([]decision.Limit, error)
	// DecideStack decides limits in order; a refusal gives back what the
	// limits before it took.
	DecideStack(ctx context.Context, req decision.Request, limits []decision.Limit, costs []int64) (decision.Stacked, error)
	// Refunds gives back what every decision of st took.
	Refunds(ctx context.Context, st *decision.Stacked)
}

// Handler is the gateway's http.Handler.
type Handler struct {
	opts      Options
	upstreams *upstreams
	log       *ratelog.Logger
	// tenantHeader is opts.TenantHeader in canonical form.
	tenantHeader string
	// drains bounds the answers read after their client left.
	drains *drainLimits
	chain  *identity.Chain

	failuresMissing, failuresInvalid, failuresUnknown, failuresLimited, failuresToken prometheus.Counter
}

// New returns a Handler.
func New(opts Options) *Handler {
	log := ratelog.New(opts.Logger, logInterval)
	f := opts.Metrics.IdentityFailures
	tenantHeader := http.CanonicalHeaderKey(cmp.Or(opts.TenantHeader, DefaultTenantHeader))
	chain := opts.Chain
	if chain == nil {
		chain = identity.NewChain(identity.APIKeys(opts.Identity))
	}
	h := &Handler{
		opts: opts, upstreams: newUpstreams(opts.Metrics, log, opts.UpstreamTimeout, tenantHeader), log: log,
		tenantHeader:    tenantHeader,
		drains:          newDrainLimits(&opts),
		chain:           chain,
		failuresMissing: f.WithLabelValues(metrics.IdentityMissing), failuresInvalid: f.WithLabelValues(metrics.IdentityInvalid),
		failuresUnknown: f.WithLabelValues(metrics.IdentityUnknown), failuresLimited: f.WithLabelValues(metrics.IdentityLimited),
		failuresToken: f.WithLabelValues(metrics.IdentityInvalidToken),
	}
	return h
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if IsGRPC(r) {
		w = grpcWriter{w} // the gateway's own answers in gRPC's form (reply)
	}
	if c := httpguard.FromContext(r.Context()); c != nil && c.Unchecked() {
		// Later requests on this connection could not be checked for bare
		// LF and CR: this one is its last.
		w.Header().Set("Connection", "close")
	}
	// Only the gateway says who the caller is: a client's own tenant
	// header goes, whatever becomes of the request.
	r.Header.Del(h.tenantHeader)
	body := h.boundBody(w, r)
	up, r := h.route(w, r)
	if up == nil {
		return
	}

	addr := h.clientAddr(r)
	if wait, blocked := h.opts.Failures.BlockedAddr(addr); blocked {
		h.refuseFailures(w, up.id, wait)
		return
	}
	caller, err := h.identify(r, up)
	if err == nil {
		h.limitAndForward(w, r, up, caller, addr, body)
		return
	}
	if wait, ok := h.opts.Failures.FailAddr(addr); !ok {
		h.refuseFailures(w, up.id, wait)
		return
	}
	h.refuseIdentity(w, up.id, err)
}

// refuseFailures answers a client address that has spent its failed
// identifications.
func (h *Handler) refuseFailures(w http.ResponseWriter, route string, wait time.Duration) {
	h.failuresLimited.Inc()
	w.Header().Set(headerRetryAfter, strconv.FormatInt(max(1, int64((wait+time.Second-1)/time.Second)), 10))
	h.reply(w, route, http.StatusTooManyRequests, "too many failed identifications from this address")
}

// failures is the failure counter of an identity error.
func (h *Handler) failures(err error) prometheus.Counter {
	switch {
	case errors.Is(err, identity.ErrMissingKey), errors.Is(err, jwtauth.ErrMissing):
		return h.failuresMissing
	case errors.Is(err, identity.ErrUnknownKey):
		return h.failuresUnknown
	case errors.Is(err, jwtauth.ErrInvalid):
		return h.failuresToken
	}
	return h.failuresInvalid
}

// limitAndForward asks the limiter and forwards or rejects. The request's
// cost comes from its rule (spec.cost.request; a malformed cost header is
// answered 400); a rule with a response cost charges it once the response
// is over (settle), before the handler returns. When rules of other kinds
// (spec.by, spec.shared) apply too, limitStacked decides them all. A
// request without an identity has no rule of the default kind.
func (h *Handler) limitAndForward(w http.ResponseWriter, r *http.Request, up *upstream, caller identity.Caller, addr netip.Addr, body *deadlineBody) {
	tenant := caller.Tenant
	var rule *snapshot.Rule
	if tenant != "" {
		rule = h.opts.Decider.RuleFor(tenant, up.id, caller.Claims)
	}
	req := decision.Request{Tenant: tenant, Route: up.id, Claims: caller.Claims, Addr: addr, Method: r.Method, Path: r.URL.Path, Header: r.Header}
	limits, err := h.opts.Decider.Limits(req, rule)
	switch {
	case err != nil:
		h.reply(w, up.id, http.StatusBadRequest, err.Error())
		return
	case limits != nil:
		h.limitStacked(w, r, up, caller, req, limits, body)
		return
	case rule == nil:
		// Anonymous, and no rule limits anonymous requests here.
		up.count(metrics.Allowed, limiter.SourceRedis)
		h.forward(w, r, up, caller, nil, decision.Decision{}, body, nil)
		return
	}
	cost, err := requestCost(r, rule.Cost)
	if err != nil {
		h.reply(w, up.id, http.StatusBadRequest, err.Error())
		return
	}
	d, err := h.opts.Decider.DecideRule(r.Context(), tenant, up.id, rule, cost)
	if err != nil {
		// Only a limiter without a failure mode (not a limiter.Chain)
		// returns errors.
		h.log.Error(err, "limiter failed", "route", up.id)
		h.reply(w, up.id, http.StatusServiceUnavailable, "rate limiter unavailable")
		return
	}
	setLimitHeaders(w.Header(), up.id, rule, d, h.opts.IETFHeaders)
	if !h.admit(w, up, rule, d, cost) {
		return
	}
	h.forward(w, r, up, caller, rule, d, body, nil)
}

// forward sends an admitted request upstream: with its concurrency slot
// and response cost when rule (the default kind's, decided d; nil for an
// anonymous request) has them. refused, when not nil, is called when the
// slot refuses the request, to give back what other limits took.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, up *upstream, caller identity.Caller, rule *snapshot.Rule, d decision.Decision, body *deadlineBody, refused func()) {
	tenant := caller.Tenant
	if rule != nil {
		// The slot is released when forwarding ends: the response body
		// sent, the client gone, the upstream failed, an upgraded
		// connection closed, or a panic (http.ErrAbortHandler) on the way
		// out.
		slot, ok := h.takeSlot(w, r, up, tenant, rule, d)
		if !ok {
			if refused != nil {
				refused()
			}
			return
		}
		defer slot.release()
	}
	// The upstream learns the tenant, never the credential (forwardIdentity,
	// stripCredential).
	stripCredential(r, up, caller)
	if tenant != "" {
		r.Header[h.tenantHeader] = []string{tenant}
	}
	if body != nil {
		// The body is read while forwarding: the upstream's error handler
		// finds it in the context to tell a client's timeout from the
		// upstream's.
		r.Body = body
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
	}
	if m := ruleMeter(rule); m != nil {
		r = m.attach(r, h.drains, up.timeout)
		// Deferred: the reverse proxy panics (http.ErrAbortHandler) when
		// the copy of the body fails; the response is charged all the same.
		defer func() {
			m.finish()
			h.settle(r.Context(), m, tenant, up, rule)
		}()
	}
	up.proxy.ServeHTTP(w, r)
}

// admit counts decision d and answers a request it does not admit (429, or
// 503 for a rule failing closed); it reports whether to forward. A request
// whose cost exceeds the capacity gets no Retry-After: it can never pass.
func (h *Handler) admit(w http.ResponseWriter, up *upstream, rule *snapshot.Rule, d decision.Decision, cost int64) bool {
	switch {
	case d.Allowed:
		up.count(metrics.Allowed, d.Source)
	case rule.Shadow:
		up.count(metrics.ShadowRejected, d.Source)
		w.Header().Set("X-RateLimit-Shadow", "would-reject")
	case d.Source == limiter.SourceFailClosed:
		up.count(metrics.Rejected, d.Source)
		setRetryAfter(w.Header(), d)
		h.reply(w, up.id, http.StatusServiceUnavailable, "rate limiter unavailable and the rule fails closed")
		return false
	default:
		up.count(metrics.Rejected, d.Source)
		setRetryAfter(w.Header(), d)
		msg := "rate limit exceeded"
		if d.RetryAfter < 0 {
			msg = "rate limit exceeded: this request costs " + strconv.FormatInt(cost, 10) +
				" tokens, more than the limit's capacity of " + strconv.FormatInt(d.Limit, 10) + "; it can never pass"
		}
		h.reply(w, up.id, http.StatusTooManyRequests, msg)
		return false
	}
	return true
}

// reply writes one of the gateway's own answers as a small JSON body, or
// to a gRPC call as its grpc-status (grpc.go).
func (h *Handler) reply(w http.ResponseWriter, route string, status int, msg string) {
	h.opts.Metrics.Responses.WithLabelValues(route, codeClass(status), metrics.OriginGateway).Inc()
	if _, ok := w.(grpcWriter); ok {
		WriteGRPCStatus(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":` + strconv.Quote(msg) + "}\n"))
}

// errorText describes an identity error without the key or token.
func errorText(err error) string {
	var ie *jwtauth.InvalidError
	switch {
	case errors.As(err, &ie):
		return "invalid bearer token: " + ie.Description
	case errors.Is(err, identity.ErrMissingKey) && errors.Is(err, jwtauth.ErrMissing):
		return "missing credentials: send an X-Api-Key header or an Authorization: Bearer token"
	case errors.Is(err, jwtauth.ErrMissing):
		return "missing Authorization: Bearer token"
	case errors.Is(err, identity.ErrMissingKey):
		return "missing X-Api-Key header"
	case errors.Is(err, identity.ErrUnknownKey):
		return "unknown API key"
	case errors.Is(err, identity.ErrInvalidKey):
		return "invalid X-Api-Key header"
	}
	return "bad request"
}

func codeClass(status int) string {
	return [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[min(max(status/100, 1), 5)-1]
}

// Close releases idle upstream connections, and cuts the answers still
// read after their clients left (they cost onClientGone).
func (h *Handler) Close() {
	h.drains.close()
	h.upstreams.closeIdle()
}
