package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/admintoken"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/explain"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/reset"
	"github.com/tollgate-dev/tollgate/dataplane/top"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
)

// The support tools of the admin listener: GET /debug/top (the tenants
// refused most, dataplane/top), POST /debug/reset (set a bucket or a
// quota in Redis, dataplane/reset) and POST /debug/forget (drop what this
// gateway holds for a bucket), the last two authenticated by
// --admin-token-file (dataplane/admintoken).

// addSupportFlags registers the flags of the support tools.
func (o *Options) addSupportFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "",
		"Bearer tokens (one per line, optionally after a name and a space; 16+ characters) that the admin listener accepts for its mutations "+
			"(POST /debug/reset and /debug/forget, `tollgate reset`), compared in constant time; reloaded on change, so tokens rotate without a restart. "+
			"\"\": mutations are refused (403) and the admin listener only reads.")
	fs.IntVar(&o.TopK, "top-k", top.DefaultK,
		"Tenant and route pairs that /debug/top tracks per step of its window (a space-saving summary: a pair refused more than 1/K of the rejections is always listed; about 200 bytes a pair).")
	fs.DurationVar(&o.TopWindow, "top-window", top.DefaultWindow,
		"Window of /debug/top and of tollgate_gateway_refused_tenants; it moves in steps of a sixth of it.")
}

// validateSupport checks the support flags.
func (o *Options) validateSupport() error {
	switch {
	case o.TopK < 1 || o.TopK > 10_000:
		return fmt.Errorf("--top-k must be in [1, 10000], got %d", o.TopK)
	case o.TopWindow < 6*time.Second || o.TopWindow > 24*time.Hour:
		return fmt.Errorf("--top-window must be in [6s, 24h], got %v", o.TopWindow)
	}
	return nil
}

// support is what the support tools need besides the gateway's parts.
type support struct {
	top     *top.Tracker
	guard   *admintoken.Guard // nil: mutations off
	metrics *metrics.Support
	name    string // pod or host name, in answers
	denied  *ratelog.Logger
}

// loadAdminTokens reads --admin-token-file, if given (loadFiles calls it
// with the other files).
func (g *Gateway) loadAdminTokens() (*admintoken.Guard, error) {
	if g.opts.AdminTokenFile == "" {
		return nil, nil
	}
	errors := g.metrics.ReloadErrors.WithLabelValues("admin-token") // at 0 from the start
	guard, err := admintoken.NewGuard(g.opts.AdminTokenFile, admintoken.Options{
		Interval: g.opts.ReloadInterval,
		OnReload: func(n int) { g.log.Info("admin tokens reloaded", "tokens", n) },
		OnError: func(err error) {
			errors.Inc()
			g.log.Error(err, "admin token file refused; the last good tokens stay in force")
		},
	})
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	return guard, nil
}

// buildSupport builds the top-K tracker and the metrics, next to the token
// guard loadFiles read. It runs before the decision engine, which reports
// to the tracker.
func (g *Gateway) buildSupport() {
	s := g.support
	s.top = top.New(top.Options{K: g.opts.TopK, Window: g.opts.TopWindow, Clock: g.opts.Clock})
	s.name = g.opts.PodName
	if s.name == "" {
		s.name, _ = os.Hostname()
	}
	s.metrics = metrics.NewSupport(g.registry, s.top.RefusedTenants)
	s.denied = ratelog.New(g.log.WithName("admin"), 10*time.Second)
}

// leaseAnnotations publish the admin port in the membership Lease, for
// `tollgate top` and `kubectl tollgate`; none when the port is not fixed.
func (o *Options) leaseAnnotations() map[string]string {
	_, port, err := net.SplitHostPort(o.AdminListen)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 {
		return nil
	}
	return map[string]string{membership.AnnotationAdminPort: port}
}

// writeJSON answers v as indented JSON, never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// replyError answers {"error": msg}.
func replyError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// onlyMethod answers 405 unless r uses method.
func onlyMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	replyError(w, http.StatusMethodNotAllowed, "method not allowed: use "+method)
	return false
}

// topHandler serves GET /debug/top[?limit=N]: the pairs this gateway
// refused most in the window, with the rule in force for each.
func (g *Gateway) topHandler(w http.ResponseWriter, r *http.Request) {
	if !onlyMethod(w, r, http.MethodGet) {
		return
	}
	limit := 0
	for name, vs := range r.URL.Query() {
		n, err := strconv.Atoi(vs[0])
		switch {
		case name != "limit":
			replyError(w, http.StatusBadRequest, name+": unknown parameter; want limit")
			return
		case err != nil || n < 1 || n > 10_000 || len(vs) > 1:
			replyError(w, http.StatusBadRequest, "limit: want one number in [1, 10000]")
			return
		}
		limit = n
	}
	rep := g.support.top.Report(limit)
	rep.Gateway, rep.Region = g.support.name, g.opts.Region
	for i := range rep.Entries {
		e := &rep.Entries[i]
		rule := g.engine.Rule(e.Tenant, e.Route)
		e.Rule = &top.Rule{Source: rule.Source, Tenant: rule.Tenant, Route: rule.Route, Capacity: rule.Capacity,
			Rate: v1alpha1.FormatRate(rule.RefillTokens, rule.Period())}
	}
	writeJSON(w, http.StatusOK, rep)
}

// mutationQuery is the parameters of a mutation.
type mutationQuery struct {
	tenant, route string
	req           reset.Request
}

// mutation serves one of the admin listener's mutations: POST only, the
// bearer token checked before anything else, then the parameters (allowed
// names those beyond tenant and route); run answers and names the result
// for the metric.
func (g *Gateway) mutation(w http.ResponseWriter, r *http.Request, action string, allowed []string,
	run func(context.Context, string, mutationQuery) (int, any, string)) {
	count := g.support.metrics.AdminMutations.WithLabelValues
	if !onlyMethod(w, r, http.MethodPost) {
		return
	}
	who, refused := g.support.guard.Authorize(r)
	if refused != nil {
		if refused.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-admin"`)
			g.support.denied.Info("admin mutation refused", "action", action, "reason", refused.Reason, "remote", r.RemoteAddr)
			count(action, metrics.MutationDenied).Inc()
		} else {
			count(action, metrics.MutationDisabled).Inc()
		}
		replyError(w, refused.Status, refused.Message)
		return
	}
	q, err := parseMutation(r, allowed)
	if err != nil {
		count(action, metrics.MutationInvalid).Inc()
		replyError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	status, answer, result := run(ctx, who, q)
	count(action, result).Inc()
	writeJSON(w, status, answer)
}

// parseMutation reads tenant, route and, when allowed, part and tokens;
// errors name the field and never echo a value.
func parseMutation(r *http.Request, allowed []string) (mutationQuery, error) {
	q := mutationQuery{req: reset.Request{Part: reset.PartBucket}}
	values := r.URL.Query()
	for name, vs := range values {
		known := name == "tenant" || name == "route"
		for _, a := range allowed {
			known = known || name == a
		}
		switch {
		case !known:
			return q, fmt.Errorf("%s: unknown parameter (reset takes a tenant id, never an API key)", name)
		case len(vs) > 1:
			return q, fmt.Errorf("%s: given %d times", name, len(vs))
		}
	}
	q.tenant, q.route = values.Get("tenant"), values.Get("route")
	if err := explain.ValidateQuery(q.tenant, q.route); err != nil {
		return q, err
	}
	if p := values.Get("part"); p != "" {
		q.req.Part = reset.Part(p)
		if q.req.Part != reset.PartBucket && q.req.Part != reset.PartQuota {
			return q, fmt.Errorf("part: want bucket or quota")
		}
	}
	if t := values.Get("tokens"); values.Has("tokens") {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 || n > reset.MaxTokens {
			return q, fmt.Errorf("tokens: want a whole number of tokens in [0, %d], or none for full", int64(reset.MaxTokens))
		}
		q.req.Tokens = &n
	}
	return q, nil
}

// resetHandler serves POST /debug/reset?tenant=T&route=R[&part=quota][&tokens=N].
func (g *Gateway) resetHandler(w http.ResponseWriter, r *http.Request) {
	g.mutation(w, r, metrics.ActionReset, []string{"part", "tokens"}, g.reset)
}

// forgetHandler serves POST /debug/forget?tenant=T&route=R.
func (g *Gateway) forgetHandler(w http.ResponseWriter, r *http.Request) {
	g.mutation(w, r, metrics.ActionForget, nil, g.forget)
}

// reset sets the bucket (or quota) of q in Redis, then forgets what this
// gateway held for it, and logs who did what (never a key or a token).
func (g *Gateway) reset(ctx context.Context, who string, q mutationQuery) (int, any, string) {
	if g.redis == nil {
		return http.StatusConflict, map[string]string{"error": "reset needs Redis: this gateway runs with --limiter=local, whose buckets are its own"}, metrics.MutationInvalid
	}
	plan := g.engine.Plan(q.tenant, q.route)
	if err := reset.Validate(plan, q.req); err != nil {
		return http.StatusBadRequest, map[string]string{"error": err.Error()}, metrics.MutationInvalid
	}
	layout := limiter.LayoutPacked
	if g.opts.RedisLayout != "" {
		layout, _ = limiter.ParseLayout(g.opts.RedisLayout) // validated
	}
	res, err := reset.Do(ctx, g.redis, plan, q.req, layout)
	g.forgetPlan(plan)
	answer := reset.Answer{Gateway: g.support.name, Who: who, Tenant: q.tenant, Route: q.route, Result: res}
	tokens := "full"
	if q.req.Tokens != nil {
		tokens = strconv.FormatInt(*q.req.Tokens, 10)
	}
	log := g.log.WithName("admin").WithValues("who", who, "tenant", q.tenant, "route", q.route, "part", q.req.Part, "tokens", tokens,
		"rule", res.Source, "region", res.Region, "before", round3(res.Before), "after", round3(res.After), "keys", len(res.Keys))
	if err != nil {
		answer.Error = err.Error()
		log.Error(err, "reset failed (in part)")
		return http.StatusServiceUnavailable, answer, metrics.MutationError
	}
	log.Info("reset")
	return http.StatusOK, answer, metrics.MutationOK
}

// forget drops what this gateway holds for q's bucket.
func (g *Gateway) forget(_ context.Context, who string, q mutationQuery) (int, any, string) {
	plan := g.engine.Plan(q.tenant, q.route)
	n := g.forgetPlan(plan)
	g.log.WithName("admin").Info("forgot the bucket's local state", "who", who, "tenant", q.tenant, "route", q.route, "buckets", n)
	return http.StatusOK, reset.Forgotten{Gateway: g.support.name, Who: who, Tenant: q.tenant, Route: q.route, Region: plan.Region, Buckets: n}, metrics.MutationOK
}

// forgetPlan forgets every bucket of plan and returns how many.
func (g *Gateway) forgetPlan(plan decision.Plan) int {
	buckets := plan.Shards
	if len(buckets) == 0 {
		buckets = []limiter.Bucket{plan.Bucket}
	}
	for _, b := range buckets {
		g.chain.Forget(b)
	}
	return len(buckets)
}

// round3 rounds tokens to three decimals, for logs.
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
