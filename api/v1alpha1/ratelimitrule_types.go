package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RateLimitRuleSpec is the limit for one tenant on one route: a token bucket
// that holds at most capacity tokens and refills at a fixed rate. Every request
// takes one token (or the cost spec.cost gives it); a request that finds too
// few tokens is rejected with 429.
//
// +kubebuilder:validation:XValidation:rule="has(self.refillPerSecond) != has(self.refill)",message="exactly one of spec.refillPerSecond and spec.refill must be set"
// +kubebuilder:validation:XValidation:rule="has(self.route) != has(self.targetRef)",message="exactly one of spec.route and spec.targetRef must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.hotKey) || !has(self.hotKey.shards) || self.capacity >= self.hotKey.shards",message="spec.capacity must be at least spec.hotKey.shards"
// +kubebuilder:validation:XValidation:rule="!has(self.cost) || !has(self.cost.request) || !has(self.cost.request.fixed) || self.cost.request.fixed <= self.capacity",message="spec.cost.request.fixed must not exceed spec.capacity"
// +kubebuilder:validation:XValidation:rule="!has(self.cost) || !has(self.cost.response) || !has(self.hotKey) || ((!has(self.hotKey.shards) || self.hotKey.shards <= 1) && (!has(self.hotKey.prefetch) || self.hotKey.prefetch == 'Off'))",message="spec.cost.response cannot be combined with spec.hotKey.prefetch or spec.hotKey.shards"
// +kubebuilder:validation:XValidation:rule="!has(self.regions) || self.regions.all(r, self.capacity * r.percent >= 100 * (has(self.hotKey) && has(self.hotKey.shards) ? self.hotKey.shards : 1))",message="spec.regions: every region's share of spec.capacity (capacity x percent / 100) must hold at least one token per shard (spec.hotKey.shards)"
// +kubebuilder:validation:XValidation:rule="!has(self.regions) || !has(self.concurrency) || self.regions.all(r, self.concurrency.maxInFlight * r.percent >= 100)",message="spec.regions: every region's share of spec.concurrency.maxInFlight (maxInFlight x percent / 100) must be at least one request"
// +kubebuilder:validation:XValidation:rule="(has(self.refill) ? (!has(self.refill.tokens) || !has(self.refill.period) || self.refill.tokens < 1) : (!has(self.refillPerSecond) || self.refillPerSecond < 1)) || (self.capacity + (has(self.cost) && has(self.cost.response) ? (has(self.cost.response.maxDebt) ? self.cost.response.maxDebt : self.capacity) : 0)) * (has(self.refill) ? duration(self.refill.period).getSeconds() : 1) / (has(self.refill) ? self.refill.tokens : self.refillPerSecond) <= 9007199254740",message="spec.capacity (plus spec.cost.response.maxDebt) must refill within 2^53 milliseconds (about 285,000 years): (capacity + maxDebt) x refill period / refill tokens must be at most 9007199254740 seconds"
// +kubebuilder:validation:XValidation:rule="!has(self.regionSplit) || has(self.regions)",message="spec.regionSplit needs spec.regions: it says whether the regions' shares follow the traffic"
// +kubebuilder:validation:XValidation:rule="!has(self.regions) || self.regions.all(r, !has(r.minPercent) || self.capacity * r.minPercent >= 100 * (has(self.hotKey) && has(self.hotKey.shards) ? self.hotKey.shards : 1))",message="spec.regions: every region's minPercent of spec.capacity must hold at least one token per shard (spec.hotKey.shards)"
// +kubebuilder:validation:XValidation:rule="!has(self.match) || self.tenant == '*'",message="spec.match needs tenant \"*\": a rule that matches claims applies to every tenant whose token carries them (a tenant's own rule already wins over it)"
// +kubebuilder:validation:XValidation:rule="!has(self.by) || !has(self.shared) || !self.shared",message="spec.shared makes one bucket for every request the rule matches: it cannot be combined with spec.by"
// +kubebuilder:validation:XValidation:rule="!(has(self.by) || (has(self.shared) && self.shared)) || (!has(self.concurrency) && (!has(self.cost) || !has(self.cost.response)))",message="spec.by and spec.shared cannot be combined with spec.concurrency or spec.cost.response, which limit per tenant and route"
type RateLimitRuleSpec struct {
	// tenant is the client this rule limits: the tenant id the gateway
	// derives from the X-Api-Key header or from a verified token's tenant
	// claim. "*" matches every tenant and makes a default rule (spec.match
	// narrows it to the tenants whose token carries some claims). 1 to 64
	// characters: letters, digits, '.', '_' and '-', starting with a letter
	// or digit.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(\*|[A-Za-z0-9][A-Za-z0-9._-]*)$`
	// +required
	Tenant string `json:"tenant"`

	// route is the gateway route id this rule limits: an id of the routes
	// file, or of an Envoy descriptor. "*" matches every route and makes a
	// default rule. Same characters and length as tenant. Set exactly one of
	// route and targetRef.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(\*|[A-Za-z0-9][A-Za-z0-9._-]*)$`
	// +optional
	Route string `json:"route,omitempty"`

	// targetRef attaches the rule to a Gateway API HTTPRoute, GRPCRoute or
	// Gateway in the rule's namespace instead of a route id (Gateway API
	// mode): the limit applies per tenant and per rule of the route, each
	// rule with a bucket of its own, or to the one rule named by
	// sectionName (a GRPCRoute rule per gRPC service or method limits that
	// service or method); on a Gateway, to every rule of the routes
	// attached to it (or to its listener sectionName). Set exactly one of
	// route and targetRef.
	// +optional
	TargetRef *TargetRef `json:"targetRef,omitempty"`

	// by lists what a bucket of this rule is keyed by, in order: tenant,
	// route, clientAddress, header, method, path and claim. Without it a
	// bucket is one tenant on one route ([{tenant: {}}, {route: {}}]).
	// Rules keyed alike form a kind; for a request the gateway finds the
	// rule in force of every kind (by the tenant and route precedence
	// within each kind) and the request must pass all of them: by:
	// [{tenant: {}}] with route "*" is a tenant's budget across its
	// routes on top of its per-route limits, by: [{clientAddress: {}}]
	// on route login limits each address, also of anonymous requests.
	// Without route in by, a rule's bucket is shared by every route it
	// matches. 1 to 8 items, each part at most once.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, (has(a.tenant) && has(b.tenant)) || (has(a.route) && has(b.route)) || (has(a.clientAddress) && has(b.clientAddress)) || (has(a.method) && has(b.method)) || (has(a.path) && has(b.path)) || (has(a.header) && has(b.header) && a.header.name.lowerAscii() == b.header.name.lowerAscii()) || (has(a.claim) && has(b.claim) && a.claim.path == b.claim.path)))",message="spec.by: each part appears at most once"
	// +optional
	By []KeyPart `json:"by,omitempty"`

	// shared makes one bucket for every request the rule matches, all
	// callers and all routes: a ceiling for the whole gateway fleet on an
	// expensive route (tenant "*", route export). It applies on top of
	// every other limit, also to anonymous requests. Not with by.
	// +optional
	Shared bool `json:"shared,omitempty"`

	// capacity is the bucket size: the largest burst admitted at once, and the
	// number of tokens a new or long-idle bucket starts with. 1 to 1000000000.
	// An empty bucket (with a response cost, one at -maxDebt) must refill
	// within 2^53 milliseconds (about 285,000 years) at the refill rate:
	// (capacity + maxDebt) x period / tokens at most 9007199254740 seconds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +required
	Capacity int64 `json:"capacity"`

	// refillPerSecond is the sustained rate in tokens per second. Shorthand for
	// refill {tokens: N, period: 1s}. Set exactly one of refillPerSecond and
	// refill. 1 to 1000000000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	RefillPerSecond *int64 `json:"refillPerSecond,omitempty"`

	// refill is the sustained rate as tokens per period, for rates that are not
	// a whole number per second: {tokens: 10, period: 1m} is exactly 10 per
	// minute. Tokens are added continuously, not in steps at the end of each
	// period. Set exactly one of refillPerSecond and refill. The bucket must
	// refill within about 285,000 years (see capacity).
	// +optional
	Refill *Refill `json:"refill,omitempty"`

	// mode is Enforce (the default: requests over the limit get 429) or
	// Shadow (a dry run: nothing is rejected, but responses and metrics show
	// what would have been, so a new limit can be tried on live traffic).
	// +kubebuilder:validation:Enum=Enforce;Shadow
	// +kubebuilder:default=Enforce
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// failureMode says what the gateway does when Redis cannot decide (down,
	// slow, failing over): LocalFallback (the default) limits on each gateway
	// with capacity/N and rate/N, N being the number of live gateway
	// replicas, so the cluster-wide limit roughly holds; FailOpen admits
	// everything; FailClosed rejects everything with 503.
	// +kubebuilder:validation:Enum=LocalFallback;FailOpen;FailClosed
	// +kubebuilder:default=LocalFallback
	// +optional
	FailureMode FailureMode `json:"failureMode,omitempty"`

	// hotKey tunes a rule whose buckets take thousands of requests per
	// second (one large tenant), trading a bounded error for fewer Redis
	// calls. Leave it out for exact limits.
	// +optional
	HotKey *HotKey `json:"hotKey,omitempty"`

	// regions splits the limit between regions by percentage: a gateway
	// started with --region <name> enforces its region's share with buckets
	// of its own, so regions never call each other's Redis. The percentages
	// must add up to 100. A gateway in a region that is not listed (or
	// without --region) enforces the whole limit. With the controller's
	// region rebalancer on (--region-rebalance, docs/regions.md) and
	// regionSplit FollowTraffic (the default), these percentages are the
	// starting split: the shares in force follow each region's measured
	// demand and are in status.regions.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.map(r, r.percent).sum() == 100",message="spec.regions: the percentages must add up to 100"
	// +kubebuilder:validation:XValidation:rule="self.map(r, has(r.minPercent) ? r.minPercent : 0).sum() <= 100",message="spec.regions: the minPercent floors must add up to at most 100"
	// +optional
	Regions []RegionShare `json:"regions,omitempty"`

	// regionSplit says whether the split of spec.regions follows the
	// traffic: FollowTraffic (the default) lets the region rebalancer move
	// the shares from the demand measured in each region, within the
	// floors (spec.regions[].minPercent); Fixed keeps spec.regions'
	// percentages in force whatever the traffic. Needs spec.regions.
	// +kubebuilder:validation:Enum=FollowTraffic;Fixed
	// +optional
	RegionSplit RegionSplit `json:"regionSplit,omitempty"`

	// concurrency caps the tenant's requests in flight on the route across
	// all gateway replicas, next to the token bucket (both must admit). A
	// request holds a slot from before it is forwarded until its response
	// ends or the client goes away. To limit concurrency alone, give the
	// token bucket a capacity and rate no client reaches. Only the HTTP
	// proxy enforces it: the Envoy rate limit service has no signal for the
	// end of a request and enforces the token bucket alone.
	// +optional
	Concurrency *Concurrency `json:"concurrency,omitempty"`

	// cost gives requests a cost other than one token: fixed or from a
	// request header, and/or charged after the upstream answered from its
	// response (a header or a JSON field), which may leave the bucket in
	// debt. HTTP routes only.
	// +optional
	Cost *Cost `json:"cost,omitempty"`

	// quota is a calendar quota next to the token bucket: at most limit
	// tokens per Day, Week (Monday to Sunday) or Month of the time zone,
	// counted exactly across gateways; a request needs both the bucket
	// and the quota to admit it. A request refused by the quota gets 429
	// with Retry-After up to the start of the next period.
	// +optional
	Quota *Quota `json:"quota,omitempty"`

	// match narrows a rule for every tenant ("*") to the requests whose
	// identity carries the given claims, so that one rule per plan
	// replaces one rule per tenant. Each tenant still gets a bucket of its
	// own, as with any "*" rule. Only the HTTP proxy with --identity=jwt
	// matches claims (an API key carries none; the Envoy rate limit
	// service sees descriptors, not tokens): without them the rule never
	// applies. Requires tenant "*".
	// +optional
	Match *RuleMatch `json:"match,omitempty"`

	// expiresAt makes the rule temporary (a boost for a launch, say): until
	// this time, written in RFC 3339 ("2025-07-01T18:00:00Z"), the rule takes
	// part in precedence and conflicts like any other (a tenant's rule beats
	// the "*" default); at this time the controller takes it out of the
	// snapshot without the object being deleted, its status says Expired,
	// and what limited the tenant before is in force again (the buckets keep
	// their tokens, as at any rule change). The object may stay, in git for
	// example: set a later time, or remove the field, to enforce it again.
	// The API server cannot compare a time with the present, so a time
	// already past when the rule is created is refused by the controller
	// (Accepted=False, reason ExpiryInPast), not at kubectl apply.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// RuleMatch is what a request's identity must carry for the rule to apply.
type RuleMatch struct {
	// claims maps claim paths to the value each must have: {plan: gold}
	// matches a token whose claim plan is "gold". A path may name a
	// nested claim with dots (org.plan); a claim whose own name has dots
	// (https://example.com/plan) is found by its whole name first. A claim
	// matches when it is the string value, a number or boolean written as
	// the value ("3", "true"), or an array holding one of those. All claims
	// must match. 1 to 8 claims; paths 1 to 256 bytes without empty names
	// (no leading, trailing or double dot), values 1 to 256 bytes, neither
	// with control characters.
	//
	// Precedence, for a tenant on a route: a rule for the tenant and the
	// route, then the tenant and route "*", then a claims rule for the
	// route, then a claims rule for route "*", then "*" and the route,
	// then "*" and "*", then the built-in default. Among claims rules that
	// all match, the one with more claims wins, then the first by its
	// claims written in order (path=value, sorted by path).
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 256 && !k.startsWith('.') && !k.endsWith('.') && !k.contains('..') && !k.matches('[[:cntrl:]]'))",message="spec.match.claims: a claim path is 1 to 256 bytes of names separated by single dots, without control characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() >= 1 && self[k].size() <= 256 && !self[k].matches('[[:cntrl:]]'))",message="spec.match.claims: a claim value is 1 to 256 bytes without control characters"
	// +required
	Claims map[string]string `json:"claims"`
}

// Quota is a number of tokens per calendar period in a time zone.
type Quota struct {
	// limit is the number of tokens the tenant may spend on the route in
	// one period: one per request, or what spec.cost makes a request and
	// its response cost. 1 to 1000000000000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000000
	// +required
	Limit int64 `json:"limit"`

	// period is the calendar period the quota covers: Day (from local
	// midnight), Week (from Monday at local midnight) or Month (from the
	// first day of the month at local midnight). The count starts again
	// from zero at the start of each period.
	// +kubebuilder:validation:Enum=Day;Week;Month
	// +required
	Period QuotaPeriod `json:"period"`

	// timeZone is the IANA time zone (for example "Europe/Paris",
	// "America/New_York") whose local midnight starts the periods, with
	// its daylight saving time rules. Default UTC. A name the controller
	// does not know is refused (status reason Invalid).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$') && self != 'Local'",message="spec.quota.timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	// +kubebuilder:default=UTC
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// QuotaPeriod is Day, Week or Month.
type QuotaPeriod string

const (
	// QuotaDay resets at local midnight.
	QuotaDay QuotaPeriod = "Day"
	// QuotaWeek resets on Monday at local midnight.
	QuotaWeek QuotaPeriod = "Week"
	// QuotaMonth resets on the first day of the month at local midnight.
	QuotaMonth QuotaPeriod = "Month"
)

// Concurrency is a cluster-wide cap on requests in flight. Slots are held
// in Redis with a lease that the gateway holding them renews while the
// request runs, so the slots of a gateway that dies come back at most
// leaseSeconds after its last renewal.
type Concurrency struct {
	// maxInFlight is the number of requests of the tenant on the route that
	// may be in flight at once, cluster-wide. One more gets 429 with
	// Retry-After: 1. With regions, each region holds its share (maxInFlight
	// x percent / 100, rounded down). During a Redis outage with failureMode
	// LocalFallback each gateway admits max(1, maxInFlight / N) at once, N
	// being the number of live replicas. 1 to 100000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +required
	MaxInFlight int32 `json:"maxInFlight"`

	// leaseSeconds is how long a slot stays held without being renewed.
	// Gateways renew the slots of their running requests every third of
	// it, so it only matters when a gateway dies (or loses Redis) with
	// requests in flight: their slots come back at most this long after
	// the last renewal. 1 to 3600; default 10.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=10
	// +optional
	LeaseSeconds int32 `json:"leaseSeconds,omitempty"`
}

// TargetRef names a Gateway (or one listener of it), an HTTPRoute or a
// GRPCRoute (or one named rule of it) in the RateLimitRule's namespace.
type TargetRef struct {
	// group must be gateway.networking.k8s.io.
	// +kubebuilder:validation:Enum=gateway.networking.k8s.io
	// +required
	Group string `json:"group"`

	// kind is HTTPRoute, GRPCRoute or Gateway. A rule on a Gateway applies
	// to every HTTPRoute rule the Gateway serves (or, with sectionName, the
	// one listener serves); a rule on a route of the same kind (spec.by)
	// wins over it for the routes both target.
	// +kubebuilder:validation:Enum=HTTPRoute;GRPCRoute;Gateway
	// +required
	Kind string `json:"kind"`

	// name is the route's or Gateway's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// sectionName, when set, is the name of one rule of the route
	// (spec.rules[].name), or of one listener of the Gateway
	// (spec.listeners[].name); the limit then applies to that rule (or
	// the routes attached to that listener) only, and takes precedence
	// over a rule for the same tenant that targets the whole route.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SectionName string `json:"sectionName,omitempty"`
}

// HotKey configures token batch prefetch and bucket sharding.
// +kubebuilder:validation:XValidation:rule="!has(self.batch) || self.prefetch != 'Off'",message="spec.hotKey.batch needs prefetch Fixed or Auto"
// +kubebuilder:validation:XValidation:rule="self.prefetch != 'Fixed' || has(self.batch)",message="spec.hotKey.batch is required with prefetch Fixed"
type HotKey struct {
	// prefetch lets each gateway take a batch of tokens from Redis in one
	// call and spend them locally. Off (default): one Redis decision per
	// request, exact. Fixed: batches of exactly batch tokens. Auto: the batch
	// is chosen from the rule's rate, the number of gateway replicas and
	// errorBudgetPercent, so that small limits stay exact (batch 1) and large
	// ones stop costing a Redis call per request. Tokens a gateway took but
	// did not use within a quarter second expire. The cluster may admit up to
	// replicas x batch more or fewer requests than the limit in any window.
	// +kubebuilder:validation:Enum=Off;Fixed;Auto
	// +kubebuilder:default=Off
	// +optional
	Prefetch PrefetchMode `json:"prefetch,omitempty"`

	// batch is the number of tokens per Redis call with prefetch Fixed, and
	// the largest batch with prefetch Auto. 2 to 10000.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Batch *int32 `json:"batch,omitempty"`

	// errorBudgetPercent bounds, with prefetch Auto, the tokens all
	// replicas may hold at once, as a percentage of the larger of capacity
	// and one second of refill. Default 5.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +kubebuilder:default=5
	// +optional
	ErrorBudgetPercent int32 `json:"errorBudgetPercent,omitempty"`

	// shards splits each bucket into this many sub-buckets, each with
	// 1/shards of the capacity and rate, stored under keys that Redis
	// Cluster spreads over its nodes, so one tenant's traffic is not bound
	// to one node. A request tries a random sub-bucket and then the others,
	// so it is only rejected when every sub-bucket is empty. 1 (default) to
	// 64; capacity must be at least shards.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	Shards int32 `json:"shards,omitempty"`
}

// PrefetchMode is Off, Fixed or Auto.
type PrefetchMode string

const (
	// PrefetchOff makes one Redis decision per request.
	PrefetchOff PrefetchMode = "Off"
	// PrefetchFixed takes batches of a fixed size.
	PrefetchFixed PrefetchMode = "Fixed"
	// PrefetchAuto sizes batches from the rate, replicas and error budget.
	PrefetchAuto PrefetchMode = "Auto"
)

// RegionShare is one region's percentage of a limit.
type RegionShare struct {
	// name is the region, as given to the gateways' --region flag: 1 to 32
	// characters of a-z, 0-9 and '-'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// percent is the region's share of capacity and rate, 1 to 100: the
	// share in force, or, when the shares follow the traffic, the starting
	// split.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Percent int32 `json:"percent"`

	// minPercent is the least share the region rebalancer gives the region
	// when the shares follow the traffic (spec.regionSplit), 1 to 100, so
	// that a quiet region can still serve a first burst; default the
	// rebalancer's floor (--region-floor, 5). The floors of all regions
	// add up to at most 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinPercent *int32 `json:"minPercent,omitempty"`
}

// RegionSplit is FollowTraffic or Fixed.
type RegionSplit string

const (
	// RegionSplitFollowTraffic lets the region rebalancer move the shares.
	RegionSplitFollowTraffic RegionSplit = "FollowTraffic"
	// RegionSplitFixed keeps spec.regions' percentages in force.
	RegionSplitFixed RegionSplit = "Fixed"
)

// RegionInForce is one region's share in force, as the region rebalancer
// last published it.
type RegionInForce struct {
	// name is the region, one of spec.regions.
	// +kubebuilder:validation:MaxLength=32
	// +required
	Name string `json:"name"`

	// percent is the share of capacity and rate the region's gateways
	// enforce.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Percent int32 `json:"percent"`

	// demand is the region's smoothed demand, in tokens asked for
	// (admitted and refused, cost included) per second, as the rebalancer
	// last measured it ("12.5").
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Demand string `json:"demand,omitempty"`

	// lastHeard is when the region's gateways last reported demand; a
	// region silent for longer than the rebalancer's --region-silent-after
	// decays to its floor.
	// +optional
	LastHeard *metav1.Time `json:"lastHeard,omitempty"`
}

// RegionChange is a change of the region shares in its first step: the
// shrinking regions have their lower share in force; the growing ones get
// theirs once every lowered region has confirmed it (its gateways decided
// under it), or at the latest after the rebalancer's
// --region-confirm-within.
type RegionChange struct {
	// target is the split the change ends at.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +required
	Target []RegionTarget `json:"target"`

	// since is when the lower shares were published (microseconds: the
	// demand windows that confirm them are shorter than a second in
	// tests).
	// +required
	Since metav1.MicroTime `json:"since"`
}

// RegionTarget is one region's share at the end of a change.
type RegionTarget struct {
	// name is the region.
	// +kubebuilder:validation:MaxLength=32
	// +required
	Name string `json:"name"`

	// percent is its share once the change is complete.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Percent int32 `json:"percent"`

	// lowered says the region's share was lowered in the first step: its
	// gateways must confirm it before any region's share is raised.
	// +optional
	Lowered bool `json:"lowered,omitempty"`
}

// Mode is Enforce or Shadow.
type Mode string

const (
	// ModeEnforce rejects requests over the limit.
	ModeEnforce Mode = "Enforce"
	// ModeShadow only reports requests over the limit.
	ModeShadow Mode = "Shadow"
)

// FailureMode is what a gateway does when Redis cannot decide.
type FailureMode string

const (
	// FailureLocalFallback limits locally with the rule divided by the
	// number of live gateway replicas.
	FailureLocalFallback FailureMode = "LocalFallback"
	// FailureOpen admits every request.
	FailureOpen FailureMode = "FailOpen"
	// FailureClosed rejects every request with 503.
	FailureClosed FailureMode = "FailClosed"
)

// Refill is a refill rate written as a number of tokens per period.
type Refill struct {
	// tokens is the number of tokens added over one period. 1 to 1000000000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +required
	Tokens int64 `json:"tokens"`

	// period is the time over which tokens are added, in whole seconds written
	// with the units h, m and s (for example "1s", "1m", "1h", "1h30m").
	// From 1s to 168h (one week).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^([0-9]+h)?([0-9]+m)?([0-9]+s)?$`
	// +kubebuilder:validation:XValidation:rule="self != '' && duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="spec.refill.period must be between 1s and 168h"
	// +required
	Period metav1.Duration `json:"period"`
}

// RateLimitRuleStatus is what the controller last observed and published.
type RateLimitRuleStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// rate is the refill rate in a short human form ("100/s", "10/1m"), for
	// kubectl get.
	// +optional
	Rate string `json:"rate,omitempty"`

	// publishedVersion is the version of the rule snapshot in which the current
	// spec was published. A gateway that has loaded this snapshot version or a
	// later one enforces the rule.
	// +optional
	PublishedVersion int64 `json:"publishedVersion,omitempty"`

	// conditions: Accepted (the rule is valid and wins its tenant+route
	// among rules of its kind, spec.by; with targetRef, reason
	// TargetNotFound while the route or Gateway, or its named rule or
	// listener, does not exist, reason Conflict when another rule of the
	// same kind on the same target wins; reason Expired once spec.expiresAt has passed,
	// ExpiryInPast when it had already passed at creation),
	// Programmed (the rule is in the published snapshot) and Ready (both).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// regions are the region shares in force, written by the region
	// rebalancer for a rule whose spec.regions follow the traffic; the
	// snapshot carries these, not spec.regions, while they name the same
	// regions. They add up to 100, or less in the middle of a change
	// (regionChange). Empty: spec.regions is in force.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Regions []RegionInForce `json:"regions,omitempty"`

	// regionSplit is status.regions in short form ("eu=70 us=30"), for
	// kubectl get -o wide.
	// +kubebuilder:validation:MaxLength=600
	// +optional
	RegionSplit string `json:"regionSplit,omitempty"`

	// regionChange is the change of shares in progress, if any: the
	// rebalancer resumes it from here after a restart.
	// +optional
	RegionChange *RegionChange `json:"regionChange,omitempty"`
}

// RateLimitRule limits the requests of one tenant on one gateway route with a
// token bucket shared by all gateway replicas.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rlr,categories=tollgate
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenant`
// +kubebuilder:printcolumn:name="Route",type=string,JSONPath=`.spec.route`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.spec.capacity`
// +kubebuilder:printcolumn:name="Rate",type=string,JSONPath=`.status.rate`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expiresAt`
// +kubebuilder:printcolumn:name="Mode",type=string,priority=1,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Version",type=integer,priority=1,JSONPath=`.status.publishedVersion`
// +kubebuilder:printcolumn:name="Regions",type=string,priority=1,JSONPath=`.status.regionSplit`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RateLimitRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the limit.
	// +required
	Spec RateLimitRuleSpec `json:"spec"`

	// status is written by the controller.
	// +optional
	Status RateLimitRuleStatus `json:"status,omitempty"`
}

// RateLimitRuleList is a list of RateLimitRules.
//
// +kubebuilder:object:root=true
type RateLimitRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimitRule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RateLimitRule{}, &RateLimitRuleList{})
}
