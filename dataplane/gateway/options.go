// Package gateway assembles the data plane: the HTTP proxy, the rule and
// route sources, the limiter chain (Redis, breaker, local fallback), replica
// counting, metrics and probes. "tollgate gateway" is a thin wrapper around it,
// and tests start real gateways in-process with it.
package gateway

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/dataplane/clientaddr"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/redisconf"
	"github.com/tollgate-dev/tollgate/internal/kubeconfig"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Limiter backends of Options.Limiter.
const (
	LimiterRedis = "redis"
	LimiterLocal = "local"
)

// Identity modes of Options.Identity: how the proxy turns the X-Api-Key
// header into a tenant id.
const (
	// IdentityMapped (the default) maps API keys to tenants with
	// --api-keys-file; unknown keys get 401.
	IdentityMapped = "mapped"
	// IdentityHeaderIsTenant takes the X-Api-Key value as the tenant id,
	// unchecked: any client can pick any tenant's bucket. Only for trusted
	// networks behind a proxy that authenticates clients and sets the header.
	IdentityHeaderIsTenant = "header-is-tenant"
)

// Options configure a gateway. AddFlags documents every field's flag.
type Options struct {
	Listen      string
	TLSListen   string
	AdminListen string
	Pprof       bool
	// H2C, H2MaxStreams, H2ResetRate: see --h2c, --h2-max-concurrent-streams
	// and --h2-reset-rate.
	H2C          bool
	H2MaxStreams int
	H2ResetRate  float64

	RLSListen      string
	RLSDomainsFile string
	RLSTLSCert     string
	RLSTLSKey      string
	RLSClientCA    string

	RoutesFile  string
	GatewayAPI  bool
	RouteTable  string
	RulesPath   string
	APIKeysFile string
	Identity    string
	IETFHeaders bool
	// TenantHeader: see --tenant-header.
	TenantHeader string
	// JWT configures --identity with jwt.
	JWT JWTOptions

	DefaultCapacity        int64
	DefaultRefillPerSecond int64

	Limiter      string
	Redis        redisconf.Options
	RedisTimeout time.Duration
	RedisMaxWait time.Duration
	// RedisLayout: see --redis-layout.
	RedisLayout string
	// EmptyBucketCache: see --empty-bucket-cache.
	EmptyBucketCache bool
	BreakerFailure   uint32
	BreakerOpenFor   time.Duration
	Batching         bool
	Pipelines        int
	// OwnConnections: see --redis-own-connections.
	OwnConnections bool
	PrefetchTTL    time.Duration
	Region         string
	// RegionDemandWindow and RegionDemandSlots: see --region-demand-window.
	RegionDemandWindow time.Duration
	RegionDemandSlots  int

	Kube              kubeconfig.Options
	SnapshotNamespace string
	SnapshotName      string

	Replicas          int
	ReplicasUntil     int
	MembershipGroup   string
	PodName           string
	LeaseDuration     time.Duration
	ReloadInterval    time.Duration
	ShutdownGrace     time.Duration
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	UpstreamTimeout   time.Duration
	ClientBodyTimeout time.Duration
	// ResponseCostDrainBytes, ResponseCostMaxDrains: see
	// --response-cost-drain-bytes and --response-cost-max-drains.
	ResponseCostDrainBytes int64
	ResponseCostMaxDrains  int

	FailureBurst        int
	FailurePerSecond    float64
	FailureMaxAddresses int

	// TrustedProxies is --trusted-proxies: the CIDRs whose
	// X-Forwarded-For (or Forwarded) names the client.
	TrustedProxies string

	// The support tools on the admin listener (support.go).
	AdminTokenFile string
	TopK           int
	TopWindow      time.Duration

	// Clock is the gateway's clock for local decisions; tests skew it.
	// Default time.Now. Not a flag.
	Clock func() time.Time
	// quotaShift moves Redis's time for quota periods as far as a test
	// moved Clock (export_test.go); never set in production.
	quotaShift time.Duration
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.addServingFlags(fs)
	o.addInputFlags(fs)
	o.JWT.AddFlags(fs)
	o.addLimiterFlags(fs)
	o.addClusterFlags(fs)
	o.addTimeoutFlags(fs)
	o.addSupportFlags(fs)
}

// addServingFlags registers the flags of the addresses the gateway serves: the proxy, the admin server and the Envoy rate limit service.
func (o *Options) addServingFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", ":8080", "Address of the proxy (client traffic).")
	fs.StringVar(&o.TLSListen, "tls-listen", "",
		"With --gateway-api: address of the HTTPS port (e.g. :8443) serving the Gateways' HTTPS listeners (TLS 1.2 and later, HTTP/2 or HTTP/1.1 by ALPN): the certificate is chosen by the client's server name (SNI) "+
			"from the Secret <route-table>-tls that the controller fills from the listeners' certificate Secrets, reloaded live. \"\" disables it.")
	o.addHTTP2Flags(fs)
	fs.StringVar(&o.AdminListen, "admin-listen", ":9090", "Address of /metrics, /healthz and /readyz; \"\" disables it.")
	fs.BoolVar(&o.Pprof, "pprof", false, "Serve /debug/pprof/ on the admin address.")

	fs.StringVar(&o.RLSListen, "rls-listen", "",
		"Address of the Envoy rate limit service (gRPC envoy.service.ratelimit.v3.RateLimitService, with grpc.health.v1 for probes), e.g. :8081; \"\" disables it. "+
			"Envoy, Istio and other Envoy-based gateways then use tollgate as their global rate limit service, with the same rules, buckets and metrics as the proxy. "+
			"With it --routes may be left out: the gateway then serves only the rate limit service (no HTTP proxy, --listen unused).")
	fs.StringVar(&o.RLSDomainsFile, "rls-domains", "",
		"With --rls-listen: rate limit domains (YAML: domains: [{name, tenantKey, routeKey, defaultRoute}]), reloaded on change; requests for other domains are then refused (InvalidArgument). "+
			"Default: every domain takes the tenant from the descriptor entry \"tenant\" and the route from \"route\".")

	fs.StringVar(&o.RLSTLSCert, "rls-tls-cert", "", "With --rls-listen: PEM certificate (chain) of the rate limit port, which then serves TLS only (with --rls-tls-key). Read at start.")
	fs.StringVar(&o.RLSTLSKey, "rls-tls-key", "", "With --rls-tls-cert: its PEM private key.")
	fs.StringVar(&o.RLSClientCA, "rls-client-ca", "",
		"With --rls-tls-cert: PEM CA certificates; clients of the rate limit port must then present a certificate they sign (mTLS).")
}

// addHTTP2Flags registers the flags of HTTP/2 from clients.
func (o *Options) addHTTP2Flags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.H2C, "h2c", false,
		"Also serve HTTP/2 without TLS on --listen (h2c with prior knowledge, as gRPC clients send it to an http:// address; no Upgrade: h2c), next to HTTP/1.1. "+
			"Off by default: plain-text HTTP/2 is for trusted networks (in-cluster gRPC clients, or a front proxy that speaks it), and a front proxy that forwards "+
			"a client's tunnel or upgraded connection as bytes would let that client speak HTTP/2 past it. The HTTPS port offers HTTP/2 (ALPN h2) either way.")
	fs.IntVar(&o.H2MaxStreams, "h2-max-concurrent-streams", 100,
		"HTTP/2: streams (requests) a client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS); requests beyond it are refused by the protocol. "+
			"Handlers run for at most this many per connection; streams reset before their handler started queue up to 4x as many, then the connection is closed (ENHANCE_YOUR_CALM).")
	fs.Float64Var(&o.H2ResetRate, "h2-reset-rate", 100,
		"HTTP/2: streams per second a client may reset (cancel) on one connection while the gateway still handles them, after a burst of twice --h2-max-concurrent-streams; "+
			"a connection that resets more (a rapid reset flood, CVE-2023-44487) is closed and counted in tollgate_gateway_http2_reset_floods_total. "+
			"gRPC clients reset a stream for every call they cancel or whose deadline passes: raise it for clients that cancel much. 0 disables the check.")
}

// addInputFlags registers the flags of what the gateway reads (routes, rules, API keys), how a request finds its tenant, and the response headers.
func (o *Options) addInputFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RoutesFile, "routes", "", "Route file (YAML): id, methods, path or pathPrefix, upstream per route. Reloaded on change. Required, unless --rls-listen is set (then without it no HTTP proxy runs).")
	fs.BoolVar(&o.GatewayAPI, "gateway-api", false,
		"Gateway API mode: serve the HTTPRoutes attached to this installation's Gateways, as compiled by the controller into the ConfigMap --route-table in --snapshot-namespace "+
			"(watched live; a ConfigMap that does not decode leaves the last good table in force). Instead of --routes; needs Kubernetes (no --rules).")
	fs.StringVar(&o.RouteTable, "route-table", routetable.DefaultName, "With --gateway-api: name of the route table ConfigMap the controller writes.")
	fs.StringVar(&o.RulesPath, "rules", "",
		"Standalone mode: a RateLimitRule manifest file or directory (the YAML users kubectl apply), reloaded on change. "+
			"Without it the gateway reads the controller's snapshot ConfigMaps from Kubernetes.")
	fs.StringVar(&o.APIKeysFile, "api-keys-file", "",
		"Map API keys to tenant ids (YAML: keys: [{tenant, sha256 | key}]), reloaded on change; unknown keys get 401. "+
			"Required by --identity=mapped (the default) when the HTTP proxy runs.")
	fs.StringVar(&o.Identity, "identity", IdentityMapped,
		"How the proxy finds a request's tenant: mapped (the X-Api-Key value is looked up in --api-keys-file; unknown keys get 401), "+
			"header-is-tenant (the X-Api-Key value IS the tenant id, unchecked: any client can use or drain any tenant's bucket; "+
			"only behind a proxy that authenticates clients and sets X-Api-Key itself; a warning is logged at start), "+
			"or jwt (an Authorization: Bearer token verified with the --jwt-* flags, the tenant from --jwt-tenant-claim). "+
			"A comma-separated list such as mapped,jwt accepts either: the first credential the request carries decides.")
	fs.IntVar(&o.FailureBurst, "identity-failure-burst", 20,
		"Failed identifications (401, 400) a client address may have in a row; after that every request from it gets 429 until it earns failures back "+
			"(so a right guess cannot be told from a wrong one). The address is the client address (see --trusted-proxies), IPv6 by /64. 0 disables the limit.")
	fs.StringVar(&o.TrustedProxies, "trusted-proxies", "",
		"Comma-separated CIDRs (or addresses) of the proxies in front of the gateway (a cloud load balancer, an ingress): for a request whose TCP peer is one of them, "+
			"the client address is read from X-Forwarded-For (or Forwarded: for=, when there is no X-Forwarded-For) from the right, past the trusted hops. "+
			"It keys the rules by clientAddress and the failed-identification limit. A header from any other peer is ignored. Empty: the TCP peer is always the client.")
	fs.Float64Var(&o.FailurePerSecond, "identity-failure-rate", 1, "Failed identifications per second a client address earns back.")
	fs.IntVar(&o.FailureMaxAddresses, "identity-failure-max-addresses", 65536,
		"Client addresses with failures tracked at once, and as many prefixes (about 90 bytes each); when full, the address with the least recent failure "+
			"leaves and its failures count for its prefix (IPv4 /24, IPv6 /56), which then judges that prefix's untracked addresses.")
	fs.BoolVar(&o.IETFHeaders, "ietf-headers", false, "Also send the IETF RateLimit and RateLimit-Policy headers.")
	fs.StringVar(&o.TenantHeader, "tenant-header", proxy.DefaultTenantHeader,
		"Request header in which the upstream learns the tenant of a forwarded request. The gateway owns it: a client's copy is removed from every request. "+
			"The API key (X-Api-Key) is never forwarded.")

	fs.Int64Var(&o.DefaultCapacity, "default-capacity", 20, "Burst of the built-in rule used when no RateLimitRule matches.")
	fs.Int64Var(&o.DefaultRefillPerSecond, "default-refill-per-second", 10, "Rate of the built-in rule used when no RateLimitRule matches.")
}

// addLimiterFlags registers the flags of how decisions are made: the limiter, Redis, the breaker, the region.
func (o *Options) addLimiterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Limiter, "limiter", LimiterRedis,
		"Decision backend: redis (shared buckets, local fallback on failure) or local (in-process buckets only, sized 1/--replicas; for trying tollgate without Redis).")
	o.Redis.AddFlags(fs)
	fs.DurationVar(&o.RedisTimeout, "redis-timeout", 5*time.Millisecond,
		"How long Redis may stay silent after a decision's call was written to it before the call fails (it then counts toward the breaker and the request is decided by the rule's failure mode). "+
			"Time queued inside a busy gateway does not count, and a Redis that is answering other calls is late, not failing: such calls are waited for up to --redis-max-wait.")
	fs.DurationVar(&o.RedisMaxWait, "redis-max-wait", 100*time.Millisecond,
		"Hard cap on one decision's wait for Redis, queueing in the gateway included: the worst latency Redis can add to a request (raised to --redis-timeout when lower). "+
			"A call given up before it was sent is never sent; one that reaches Redis after its caller gave up takes nothing.")
	fs.StringVar(&o.RedisLayout, "redis-layout", "packed",
		"How buckets are stored in Redis: packed (a tenant's buckets are fields of one hash rl:{tenant}, about 60 bytes each; a bucket tollgate 0.1 wrote is moved there, with its tokens, on first use) or "+
			"compat-0.1 (the 0.1 form, a hash per bucket, is read and written too, so that 0.1 and newer gateways share every bucket while a rolling upgrade from 0.1 is under way; switch back to packed when it is done).")
	fs.BoolVar(&o.EmptyBucketCache, "empty-bucket-cache", true,
		"After Redis refused a request, reject the bucket's requests it cannot serve without asking Redis, each with the answer Redis would give for its cost (computed from the bucket's state in Redis's last answer, refilled to now; exact: tokens only arrive at the refill rate). False asks Redis for every request.")
	fs.Uint32Var(&o.BreakerFailure, "breaker-failures", 5, "Consecutive Redis failures that open the circuit breaker (no request waits for Redis while it is open).")
	fs.DurationVar(&o.BreakerOpenFor, "breaker-open-for", 500*time.Millisecond, "How long the breaker stays open before one background probe tries Redis again.")
	fs.BoolVar(&o.Batching, "redis-batching", true,
		"Save Redis round trips under load: concurrent requests for one bucket share a script call. Exact either way; false sends one script call per request (the classic design).")
	fs.IntVar(&o.Pipelines, "redis-pipelines", 4, "Calls (pipelines) in flight to Redis at once; with --redis-batching=false at least 64 are used.")
	fs.BoolVar(&o.OwnConnections, "redis-own-connections", true,
		"Standalone Redis: each pipeline worker sends its script calls on a connection of its own, written and read without the client library's pool and command objects (cheaper per decision; same address, TLS, ACL user, password and database). "+
			"False sends them through the client's pool. Sentinel and Cluster always use the client's pool.")
	fs.DurationVar(&o.PrefetchTTL, "prefetch-ttl", 250*time.Millisecond, "How long tokens prefetched for a hotKey rule, or granted by Redis after their request was already answered (Redis stalled), stay usable for the next requests of the bucket before they are dropped.")
	fs.StringVar(&o.Region, "region", "",
		"This gateway's region: rules with spec.regions are enforced at this region's share, with keys of their own. Default: none (whole limits).")
	fs.DurationVar(&o.RegionDemandWindow, "region-demand-window", 10*time.Second,
		"With --region: the window of the demand each decision of a rule whose region shares follow the traffic records in this region's Redis (in the same script call), for the region rebalancer. 0: record nothing.")
	fs.IntVar(&o.RegionDemandSlots, "region-demand-slots", 12, "With --region: the windows of demand kept per rule and region (a ring: fixed size, expired after twice its span).")
}

// addClusterFlags registers the flags of Kubernetes: the snapshot ConfigMaps and the count of replicas.
func (o *Options) addClusterFlags(fs *pflag.FlagSet) {
	o.Kube.AddFlags(fs)
	fs.StringVar(&o.SnapshotNamespace, "snapshot-namespace", podNamespace(), "Namespace of the controller's rule snapshot ConfigMaps (and of the replica Leases).")
	fs.StringVar(&o.SnapshotName, "snapshot-name", "tollgate-rules", "Snapshot name: the ConfigMaps labelled ratelimit.tollgate.dev/snapshot=<name> are read.")

	fs.IntVar(&o.Replicas, "replicas", 1, "Standalone mode: the number of gateway replicas N sharing the limits (the fallback enforces 1/N). In Kubernetes N is counted live from Leases.")
	fs.IntVar(&o.ReplicasUntil, "replicas-until-counted", 10,
		"In Kubernetes: the replica count N the fallback assumes until the Leases have been counted (at start, or when Lease access is missing or the API server is unreachable from the start). "+
			"A count too high only makes the fallback stricter; 1 would let this replica admit the whole limit on its own. The chart sets it to the Deployment's replicas (or the autoscaler's maximum). "+
			"tollgate_gateway_replicas_counted says which applies.")
	fs.StringVar(&o.MembershipGroup, "membership-group", "tollgate-gateway", "Name shared by the gateway replicas that count each other through Leases.")
	fs.StringVar(&o.PodName, "pod-name", os.Getenv("POD_NAME"), "This replica's name in its Lease. Default: $POD_NAME, else the host name.")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", 6*time.Second, "A replica whose Lease is not renewed for this long stops counting.")
}

// addTimeoutFlags registers the flags of the reload interval, the timeouts of client and upstream connections, and the bounds of the read of an answer after its client left.
func (o *Options) addTimeoutFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ReloadInterval, "reload-interval", time.Second, "How often the routes, rules and API key files are checked for changes.")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", 15*time.Second, "On SIGTERM, time given to in-flight requests before the gateway exits.")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", 10*time.Second, "Time a client has to send request headers.")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", 120*time.Second, "How long an idle client keep-alive connection stays open.")
	fs.DurationVar(&o.UpstreamTimeout, "upstream-timeout", 30*time.Second,
		"Time an upstream has to send its response headers, for routes without a timeout of their own; slower answers get 504. At most 10m.")
	fs.DurationVar(&o.ClientBodyTimeout, "client-body-timeout", 60*time.Second,
		"Time a client has to send its whole request body; a body still unfinished then gets 408 and the connection is closed. "+
			"Not for gRPC calls, whose request is a stream open as long as the call: their grpc-timeout bounds them.")
	fs.Int64Var(&o.ResponseCostDrainBytes, "response-cost-drain-bytes", proxy.DefaultDrainBytes,
		"Rules with a response cost in a body field: when a client leaves before the cost came, the gateway reads on up to this many bytes of the answer "+
			"(and for at most the route's timeout) to charge the cost it reports; cut off sooner, the answer costs the rule's onClientGone. 0 reads nothing (onClientGone at once).")
	fs.IntVar(&o.ResponseCostMaxDrains, "response-cost-max-drains", proxy.DefaultMaxDrains,
		"Answers the gateway reads on at once after their client left (see --response-cost-drain-bytes); a client that leaves while this many are read "+
			"has its upstream request canceled and is charged onClientGone (tollgate_gateway_response_drains_refused_total).")
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch {
	case o.GatewayAPI && o.RoutesFile != "":
		return fmt.Errorf("--gateway-api and --routes exclude each other: routes come either from HTTPRoutes or from a routes file")
	case o.GatewayAPI && o.RulesPath != "":
		return fmt.Errorf("--gateway-api needs Kubernetes: rules then come from the controller's snapshot, not --rules")
	case o.TLSListen != "" && !o.GatewayAPI:
		return fmt.Errorf("--tls-listen needs --gateway-api: its certificates come from the Gateways' HTTPS listeners")
	case o.GatewayAPI && o.RouteTable == "":
		return fmt.Errorf("--route-table must not be empty with --gateway-api")
	case o.RoutesFile == "" && !o.GatewayAPI && o.RLSListen == "":
		return fmt.Errorf("--routes is required (or --gateway-api, or --rls-listen to serve only the Envoy rate limit service)")
	case o.RLSDomainsFile != "" && o.RLSListen == "":
		return fmt.Errorf("--rls-domains needs --rls-listen")
	case o.DefaultCapacity < 1 || o.DefaultCapacity > snapshot.MaxCapacity:
		return fmt.Errorf("--default-capacity must be in [1, %d]", snapshot.MaxCapacity)
	case o.DefaultRefillPerSecond < 1 || o.DefaultRefillPerSecond > snapshot.MaxRefillTokens:
		return fmt.Errorf("--default-refill-per-second must be in [1, %d]", snapshot.MaxRefillTokens)
	case o.Limiter != LimiterRedis && o.Limiter != LimiterLocal:
		return fmt.Errorf("--limiter %q: want redis or local", o.Limiter)
	case o.RedisTimeout <= 0:
		return fmt.Errorf("--redis-timeout must be positive")
	case o.RedisLayout != "" && o.RedisLayout != "packed" && o.RedisLayout != "compat-0.1":
		return fmt.Errorf("--redis-layout %q: want packed or compat-0.1", o.RedisLayout)
	case o.Replicas < 1:
		return fmt.Errorf("--replicas must be at least 1")
	case o.ReplicasUntil < 1:
		return fmt.Errorf("--replicas-until-counted must be at least 1")
	case o.LeaseDuration < time.Second:
		return fmt.Errorf("--lease-duration must be at least 1s")
	case o.FailureBurst < 0 || o.FailurePerSecond <= 0 || o.FailureMaxAddresses < 1:
		return fmt.Errorf("--identity-failure-burst must not be negative, --identity-failure-rate must be positive and --identity-failure-max-addresses at least 1")
	case o.Pipelines < 1:
		return fmt.Errorf("--redis-pipelines must be at least 1")
	}
	for _, check := range [...]func() error{o.validateRegion, o.validateTimeouts, o.validateIdentity} {
		if err := check(); err != nil {
			return err
		}
	}
	if _, err := clientaddr.Parse(o.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	if err := proxy.CheckTenantHeader(o.TenantHeader); err != nil {
		return fmt.Errorf("--tenant-header: %w", err)
	}
	if err := o.validateSupport(); err != nil {
		return err
	}
	if err := o.validateRLSTLS(); err != nil {
		return err
	}
	if o.Limiter == LimiterRedis {
		return o.Redis.Validate()
	}
	return nil
}

// validateTimeouts checks the flags of addTimeoutFlags.
// validateRegion checks --region and the demand it records.
func (o *Options) validateRegion() error {
	switch {
	case o.Region != "" && !snapshot.ValidRegion(o.Region):
		return fmt.Errorf("--region %q: 1 to 32 characters of a-z, 0-9 and '-'", o.Region)
	case o.RegionDemandWindow < 0 || (o.RegionDemandWindow > 0 && o.RegionDemandWindow < 10*time.Millisecond):
		return fmt.Errorf("--region-demand-window must be 0 or at least 10ms")
	case o.RegionDemandSlots != 0 && (o.RegionDemandSlots < 2 || o.RegionDemandSlots > 1000):
		return fmt.Errorf("--region-demand-slots must be between 2 and 1000")
	}
	return nil
}

func (o *Options) validateTimeouts() error {
	switch {
	case o.ReloadInterval <= 0 || o.ShutdownGrace < 0:
		return fmt.Errorf("--reload-interval must be positive and --shutdown-grace not negative")
	case o.ReadHeaderTimeout <= 0 || o.IdleTimeout <= 0:
		return fmt.Errorf("--read-header-timeout and --idle-timeout must be positive")
	case o.H2MaxStreams < 1 || o.H2MaxStreams > maxH2Streams:
		return fmt.Errorf("--h2-max-concurrent-streams must be in [1, %d], got %d", maxH2Streams, o.H2MaxStreams)
	case o.H2ResetRate < 0:
		return fmt.Errorf("--h2-reset-rate must not be negative, got %v", o.H2ResetRate)
	case o.UpstreamTimeout <= 0 || o.UpstreamTimeout > 10*time.Minute:
		return fmt.Errorf("--upstream-timeout must be in (0, 10m], got %v", o.UpstreamTimeout)
	case o.ClientBodyTimeout <= 0:
		return fmt.Errorf("--client-body-timeout must be positive, got %v", o.ClientBodyTimeout)
	case o.ResponseCostDrainBytes < 0 || o.ResponseCostMaxDrains < 0:
		return fmt.Errorf("--response-cost-drain-bytes and --response-cost-max-drains must not be negative")
	}
	return nil
}

// validateIdentity checks --identity against --api-keys-file and the
// --jwt-* flags. The rate limit service alone (no --routes) takes tenants
// from Envoy's descriptors and needs no keys.
func (o *Options) validateIdentity() error {
	methods, err := identityMethods(o.Identity)
	if err != nil {
		return err
	}
	if err := o.JWT.validate(slices.Contains(methods, IdentityJWT), o.RulesPath == ""); err != nil {
		return err
	}
	switch {
	case slices.Contains(methods, IdentityMapped):
		if o.APIKeysFile == "" && (o.RoutesFile != "" || o.GatewayAPI) {
			return fmt.Errorf("--api-keys-file is required: with --identity=mapped (the default) the proxy maps API keys to tenants " +
				"and refuses unknown keys; on a trusted network behind an authenticating proxy, --identity=header-is-tenant " +
				"takes the X-Api-Key value as the tenant id instead")
		}
	case o.APIKeysFile != "":
		return fmt.Errorf("--api-keys-file needs mapped in --identity: keys are mapped to tenants only with --identity=mapped (or a list with it, such as mapped,jwt)")
	}
	return nil
}

// defaultRule is the built-in rule.
func (o *Options) defaultRule() snapshot.Rule {
	return snapshot.Rule{
		Tenant: "*", Route: "*", Capacity: o.DefaultCapacity,
		RefillTokens: o.DefaultRefillPerSecond, RefillPeriodMs: 1000, Source: "built-in default",
	}
}

func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "tollgate-system"
}
