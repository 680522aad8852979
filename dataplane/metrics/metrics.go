// Package metrics defines the gateway's Prometheus metrics. Labels never
// carry a tenant or an API key: their number is unbounded and keys are
// credentials.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate-dev/tollgate/internal/version"
)

// Decision results, the "result" label of tollgate_gateway_decisions_total.
const (
	ResultAllowed        = "allowed"
	ResultRejected       = "rejected"
	ResultShadowRejected = "shadow_rejected"
)

// Gateway holds the gateway's metrics.
type Gateway struct {
	reg prometheus.Registerer

	// Decisions counts limiter decisions by route, result and source
	// (redis, local, fail-open, fail-closed).
	Decisions *prometheus.CounterVec
	// Responses counts responses by route, status code class (2xx, 4xx...)
	// and origin: OriginGateway for the gateway's own answers (401, 404,
	// 429, 503 of a limiter that fails closed...), OriginUpstream for the
	// upstream's answers and the 502/504 the gateway writes when the
	// upstream fails or times out.
	Responses *prometheus.CounterVec
	// RedisDuration observes every Redis decision call.
	RedisDuration prometheus.Histogram
	// RedisErrors counts failed Redis decision calls (not script errors).
	RedisErrors prometheus.Counter
	// RedisScriptErrors counts Redis calls that failed in a script, by
	// script (ScriptTokenBucket, ScriptConcurrency): Redis answered, so
	// they are not RedisErrors and never open the breaker.
	RedisScriptErrors *prometheus.CounterVec
	// Stacked counts the requests several limits applied to, by how they
	// were decided: StackOneCall (one script call, all or nothing) or
	// StackInOrder (one limit after the other, refunds after a refusal).
	Stacked                    *prometheus.CounterVec
	stackedOne, stackedInOrder prometheus.Counter
	// RedisTimeout is the deadline of one Redis decision (--redis-timeout),
	// 0 without Redis; alerts compare the latency with it.
	RedisTimeout prometheus.Gauge
	// Breaker is 1 for the circuit breaker's current state, 0 for the others.
	Breaker *prometheus.GaugeVec
	// Replicas is the live gateway replica count N used by the fallback.
	Replicas prometheus.Gauge
	// ReplicasCounted is 1 once N was counted from Leases, 0 while the
	// gateway assumes --replicas-until-counted.
	ReplicasCounted prometheus.Gauge
	// SnapshotVersion is the loaded rule snapshot's version.
	SnapshotVersion prometheus.Gauge
	// SnapshotFormat is the format of the loaded rule snapshot's shards.
	SnapshotFormat prometheus.Gauge
	// BuildInfo is 1, labelled with the binary's version, commit and Go
	// version.
	BuildInfo *prometheus.GaugeVec
	// SnapshotLoaded is the Unix time the current snapshot was loaded.
	SnapshotLoaded prometheus.Gauge
	// Rules is the number of rules in the loaded snapshot.
	Rules prometheus.Gauge
	// ReloadErrors counts rejected rule, route or key reloads, by source.
	ReloadErrors *prometheus.CounterVec
	// ForeignRefused counts objects refused because the controller does not
	// own them (a snapshot ConfigMap, the route table ConfigMap or its TLS
	// Secret without the controller's name and labels), by source (rules,
	// httproutes, tls); every refused version counts. See dataplane/foreign.
	ForeignRefused *prometheus.CounterVec
	// UpstreamDuration observes time to upstream response headers by route.
	UpstreamDuration *prometheus.HistogramVec
	// IdentityFailures counts requests refused before a tenant was found, by
	// reason (IdentityMissing, IdentityInvalid, IdentityUnknown,
	// IdentityLimited). It never carries the key.
	IdentityFailures *prometheus.CounterVec
	// ForwardedMalformed counts requests from a trusted proxy
	// (--trusted-proxies) whose X-Forwarded-For or Forwarded header did
	// not parse: their client address is the proxy's.
	ForwardedMalformed prometheus.Counter
	// ConcurrencyInFlight is the number of concurrency slots (spec.concurrency)
	// this gateway holds, by route.
	ConcurrencyInFlight *prometheus.GaugeVec
	// ConcurrencyRejections counts requests refused a concurrency slot, by
	// route, result (rejected, shadow_rejected) and source (redis, local,
	// fail-closed).
	ConcurrencyRejections *prometheus.CounterVec
	// ConcurrencyUnenforced counts decisions of the Envoy rate limit service
	// for rules with spec.concurrency, which it cannot enforce (no signal for
	// the end of a request): only their token bucket decided.
	ConcurrencyUnenforced prometheus.Counter
	// ResponseCharges counts the responses of response-cost rules by route
	// and basis (CostReported, CostDefault, CostError); ResponseCostTokens
	// sums the tokens charged for them (a charge cut at the debt floor
	// counts what was taken).
	ResponseCharges, ResponseCostTokens *prometheus.CounterVec
	// ResponseDrains is the number of answers of response-cost rules the
	// gateway reads on after their client left, to find their cost;
	// ResponseDrainsRefused counts the clients that left while
	// --response-cost-max-drains answers were read so (charged
	// onClientGone at once, their upstream request canceled).
	ResponseDrains        prometheus.Gauge
	ResponseDrainsRefused prometheus.Counter
}

// Bases of Gateway.ResponseCharges: where a response's cost came from.
const (
	CostReported = "reported" // the response's header or JSON field
	CostDefault  = "default"  // no usable value: the rule's default
	CostError    = "error"    // the upstream failed or the body broke off: onError
	// CostClientGone: the client left before the cost came, and the
	// gateway did not find it without the client: onClientGone.
	CostClientGone = "client_gone"
)

// Scripts of Gateway.RedisScriptErrors.
const (
	ScriptTokenBucket = "token_bucket" // lua/token_bucket.lua
	ScriptConcurrency = "concurrency"  // lua/concurrency.lua
)

// Reasons of Gateway.IdentityFailures.
const (
	IdentityMissing = "missing" // no X-Api-Key (401)
	IdentityInvalid = "invalid" // malformed X-Api-Key (400)
	IdentityUnknown = "unknown" // a key of no tenant (401)
	IdentityLimited = "limited" // the client address spent its failures (429)
	// IdentityInvalidToken: a bearer token refused (401 invalid_token);
	// JWT.Refused says why.
	IdentityInvalidToken = "invalid_token"
)

// Origins of Gateway.Responses.
const (
	OriginGateway  = "gateway"  // the gateway's own answer
	OriginUpstream = "upstream" // the upstream's answer, or 502/504 when it failed
)

// NewGateway creates the metrics and registers them, with the Go and process
// collectors, on reg.
// long: one declaration per metric, read as a table of names and help texts.
func NewGateway(reg prometheus.Registerer) *Gateway {
	m := &Gateway{
		reg: reg,
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_decisions_total",
			Help: "Rate limit decisions by route, result (allowed, rejected, shadow_rejected) and source (redis, local, fail-open, fail-closed).",
		}, []string{"route", "result", "source"}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_responses_total",
			Help: "Responses by route (\"none\" when no route matched), status class and origin (gateway: the gateway's own answer; upstream: the upstream's, or the 502/504 written when it failed).",
		}, []string{"route", "code", "origin"}),
		RedisDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_gateway_redis_duration_seconds",
			Help:    "Duration of Redis decision calls, failed ones included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .1},
		}),
		RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_gateway_redis_errors_total",
			Help: "Redis decision calls that failed or timed out (script errors are counted in tollgate_gateway_redis_script_errors_total).",
		}),
		RedisScriptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_redis_script_errors_total",
			Help: "Redis calls that failed in a script (token_bucket, concurrency), for one bucket: a key of another type, an argument Redis refused. Redis answered: they do not open the circuit breaker, and the request follows its rule's failure mode.",
		}, []string{"script"}),
		Stacked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_stacked_decisions_total",
			Help: "Requests several limits applied to, by how they were decided: one_call (one script call, all or nothing) or in_order (one limit after the other, what was taken given back after a refusal).",
		}, []string{"decided"}),
		RedisTimeout: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_redis_timeout_seconds",
			Help: "Deadline of one Redis decision call (--redis-timeout); 0 with --limiter=local.",
		}),
		Breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_gateway_breaker_state",
			Help: "1 for the Redis circuit breaker's current state (closed, open, half-open), 0 otherwise.",
		}, []string{"state"}),
		Replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_replicas",
			Help: "Live gateway replicas observed (N); the local fallback enforces 1/N of each rule.",
		}),
		ReplicasCounted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_replicas_counted",
			Help: "1 once the replica count N was counted from Leases (or given by --replicas); 0 while the gateway assumes --replicas-until-counted.",
		}),
		SnapshotVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_snapshot_version",
			Help: "Version of the loaded rule snapshot.",
		}),
		SnapshotFormat: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_snapshot_format",
			Help: "Format of the loaded rule snapshot (1: placed by tenant, 2: by tenant and route); a shard in a format this gateway does not read is refused and counted in tollgate_gateway_reload_errors_total{source=\"rules\"}.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_build_info",
			Help: "1, labelled with the running binary's version, commit and Go version (tollgate version).",
		}, []string{"version", "commit", "goversion"}),
		SnapshotLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_snapshot_loaded_timestamp_seconds",
			Help: "Unix time the loaded rule snapshot was swapped in; time() minus this is its age.",
		}),
		Rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_rules",
			Help: "Rules in the loaded snapshot.",
		}),
		IdentityFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_identity_failures_total",
			Help: "Requests refused before a tenant was found, by reason: missing (401: no API key or bearer token), invalid (400) or unknown (401) API key, invalid_token (401: a bearer token refused), or limited (429: the client address has no failed identification left).",
		}, []string{"reason"}),
		ForwardedMalformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_gateway_forwarded_malformed_total",
			Help: "Requests from a trusted proxy (--trusted-proxies) whose X-Forwarded-For or Forwarded header did not parse; the proxy's address was taken as the client's.",
		}),
		ReloadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_reload_errors_total",
			Help: "Rejected reloads by source (rules, routes, api-keys, jwks, jwt-secret); the last good version stays in use.",
		}, []string{"source"}),
		ForeignRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_foreign_refused_total",
			Help: "Objects the gateway refused to load because the controller does not own them, by source (rules: a snapshot ConfigMap not named <snapshot>-<i>-of-<n> or without the label app.kubernetes.io/managed-by=tollgate-controller; httproutes, tls: the route table ConfigMap or its TLS Secret without the controller's labels); a ForeignConfigMap or ForeignSecret Event names each.",
		}, []string{"source"}),
		ResponseCharges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_response_charges_total",
			Help: "Responses of rules with a response cost, by route and basis of the charge (reported: the response's value; default: none usable; error: the upstream failed or the body broke off; " +
				"client_gone: the client left before the value came and the gateway did not find it reading on without the client).",
		}, []string{"route", "basis"}),
		ResponseCostTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_response_cost_tokens_total",
			Help: "Tokens charged after responses of rules with a response cost, by route and basis (a charge cut at the debt floor counts what was taken).",
		}, []string{"route", "basis"}),
		ResponseDrains: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_gateway_response_drains_in_flight",
			Help: "Answers of rules with a response cost that the gateway reads on after their client left, to charge the cost they report (at most --response-cost-max-drains).",
		}),
		ResponseDrainsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_gateway_response_drains_refused_total",
			Help: "Clients of rules with a response cost that left while --response-cost-max-drains answers were read on without their clients: their upstream request was canceled and onClientGone charged.",
		}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_gateway_upstream_duration_seconds",
			Help:    "Time from forwarding a request to the upstream's response headers, by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		ConcurrencyInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_gateway_concurrency_in_flight",
			Help: "Concurrency slots (spec.concurrency) held by this gateway's requests in flight, by route.",
		}, []string{"route"}),
		ConcurrencyRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_gateway_concurrency_rejections_total",
			Help: "Requests refused a concurrency slot, by route, result (rejected, shadow_rejected) and source (redis: the cluster-wide limit; local: the local share during a Redis outage, or a Redis call that failed; fail-closed).",
		}, []string{"route", "result", "source"}),
		ConcurrencyUnenforced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_rls_concurrency_unenforced_total",
			Help: "Rate limit service decisions under rules with spec.concurrency, which Envoy's protocol cannot enforce (no end-of-request signal): only the token bucket decided.",
		}),
	}
	reg.MustRegister(m.Decisions, m.Responses, m.RedisDuration, m.RedisErrors, m.RedisScriptErrors, m.Stacked, m.RedisTimeout, m.Breaker, m.Replicas, m.ReplicasCounted,
		m.SnapshotVersion, m.SnapshotFormat, m.BuildInfo, m.SnapshotLoaded, m.Rules, m.ReloadErrors, m.ForeignRefused, m.UpstreamDuration, m.IdentityFailures, m.ForwardedMalformed,
		m.ConcurrencyInFlight, m.ConcurrencyRejections, m.ConcurrencyUnenforced,
		m.ResponseCharges, m.ResponseCostTokens, m.ResponseDrains, m.ResponseDrainsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []string{"closed", "open", "half-open"} {
		m.Breaker.WithLabelValues(s).Set(0)
	}
	m.Breaker.WithLabelValues("closed").Set(1)
	for _, s := range []string{ScriptTokenBucket, ScriptConcurrency} {
		m.RedisScriptErrors.WithLabelValues(s) // 0 until the first error
	}
	m.stackedOne, m.stackedInOrder = m.Stacked.WithLabelValues(StackOneCall), m.Stacked.WithLabelValues(StackInOrder)
	// At 0 from the start: a counter born at 1 shows no increase.
	for _, s := range []string{"rules", "httproutes", "tls"} {
		m.ForeignRefused.WithLabelValues(s)
	}
	v := version.Get()
	m.BuildInfo.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	return m
}

// How a stack of limits was decided (Gateway.Stacked's label).
const (
	StackOneCall = "one_call"
	StackInOrder = "in_order"
)

// ObserveStacked counts a request whose limits stacked, decided in one
// call or in order (decision.Options.Stacked). Safe on a nil Gateway.
func (m *Gateway) ObserveStacked(oneCall bool) {
	if m == nil {
		return
	}
	if oneCall {
		m.stackedOne.Inc()
	} else {
		m.stackedInOrder.Inc()
	}
}

// RegisterRedisStats exports the limiter's Redis traffic: round trips,
// script calls and the decisions they answered. stats is read at scrape
// time.
func (m *Gateway) RegisterRedisStats(stats func() (roundTrips, commands, decisions int64)) {
	field := func(i int) func() float64 {
		return func() float64 {
			r, c, d := stats()
			return float64([3]int64{r, c, d}[i])
		}
	}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_gateway_redis_roundtrips_total",
			Help: "Round trips to Redis for decisions (a pipeline counts once).",
		}, field(0)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_gateway_redis_commands_total",
			Help: "Token bucket script calls sent to Redis.",
		}, field(1)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_gateway_redis_decisions_total",
			Help: "Requests answered by those calls (several share a call when they coalesce).",
		}, field(2)),
	)
}

// RegisterRedisWaits exports the requests that waited for Redis; waits is
// read at scrape time.
func (m *Gateway) RegisterRedisWaits(waits func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tollgate_gateway_redis_waits_total",
		Help: "Requests that waited for Redis: their call was queued or sent to it, failed ones included. Still while the circuit breaker is open: the local fallback decides at once.",
	}, func() float64 { return float64(waits()) }))
}

// SetBreaker records a breaker state change.
func (m *Gateway) SetBreaker(from, to string) {
	m.Breaker.WithLabelValues(from).Set(0)
	m.Breaker.WithLabelValues(to).Set(1)
}

// ObserveRedis records one Redis decision call.
func (m *Gateway) ObserveRedis(d time.Duration, err error) {
	m.RedisDuration.Observe(d.Seconds())
	if err != nil {
		m.RedisErrors.Inc()
	}
}

// Result indexes a decision result in DecisionCounters.
type Result uint8

// Decision results, in the order of their labels.
const (
	Allowed Result = iota
	Rejected
	ShadowRejected
	numResults
)

var resultLabels = [numResults]string{ResultAllowed, ResultRejected, ResultShadowRejected}

// DecisionCounters are the series of tollgate_gateway_decisions_total of one
// route, resolved once, so that the request path (HTTP and Envoy alike) does
// no label lookup. A nil *DecisionCounters counts nothing.
type DecisionCounters struct {
	c [numResults][]prometheus.Counter
}

// DecisionCounters resolves the series of route for every result and for
// sources 0 to sources-1, whose "source" label is sourceName(i). It returns
// nil on a nil Gateway.
func (g *Gateway) DecisionCounters(route string, sources int, sourceName func(int) string) *DecisionCounters {
	if g == nil {
		return nil
	}
	d := &DecisionCounters{}
	for r := range numResults {
		d.c[r] = make([]prometheus.Counter, sources)
		for src := range sources {
			d.c[r][src] = g.Decisions.WithLabelValues(route, resultLabels[r], sourceName(src))
		}
	}
	return d
}

// Inc counts one decision with result r made by source src; a source out of
// range is not counted.
func (d *DecisionCounters) Inc(r Result, src int) {
	if d == nil || r >= numResults || src < 0 || src >= len(d.c[r]) {
		return
	}
	d.c[r][src].Inc()
}
