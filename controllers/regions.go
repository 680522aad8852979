package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/lib/certpool"
	"github.com/tollgate-dev/tollgate/pkg/regionshares"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// RegionOptions configure the region rebalancer (docs/regions.md): off
// unless Enabled, and then it needs the Redis of every region.
type RegionOptions struct {
	// Enabled runs the rebalancer (--region-rebalance), in the leader.
	Enabled bool
	// Redis maps each region to the address of its Redis (host:port), read
	// off the request path.
	Redis map[string]string
	// Username and PasswordFile authenticate to every region's Redis (an
	// ACL user that may SCAN, HGETALL and TIME is enough); without the
	// file the TOLLGATE_REGION_REDIS_PASSWORD environment variable is
	// used.
	Username, PasswordFile string
	// Mode is how every region's Redis is deployed: standalone (the
	// address is the server) or cluster (the address is one node; the
	// pass reads every master). Default standalone.
	Mode string
	// TLS connects to every region's Redis over TLS, verified against the
	// CA certificates in TLSCAFile (default: the system's roots) for
	// TLSServerName (default: the address's host).
	TLS                      bool
	TLSCAFile, TLSServerName string
	// Interval between two passes. Default 1m.
	Interval time.Duration
	// ReadTimeout bounds the reading of one region's Redis in a pass; a
	// region that takes longer counts as unreachable. Default 5s.
	ReadTimeout time.Duration
	// Shares are the knobs of regionshares.Step.
	Shares regionshares.Config
}

// AddFlags registers the options as command-line flags.
func (o *RegionOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "region-rebalance", false,
		"Run the region rebalancer (in the elected leader): the shares of rules split between regions (spec.regions, regionSplit FollowTraffic) follow the demand the gateways record in each region's Redis (docs/regions.md).")
	fs.StringToStringVar(&o.Redis, "region-redis", nil, "With --region-rebalance: each region's Redis, region=host:port, comma-separated (eu=redis.eu:6379,us=redis.us:6379).")
	fs.StringVar(&o.Username, "region-redis-username", "", "With --region-rebalance: the ACL user for every region's Redis (it needs SCAN, HGETALL and TIME); empty: the default user.")
	fs.StringVar(&o.PasswordFile, "region-redis-password-file", "", "With --region-rebalance: a file holding the password of every region's Redis; empty: the "+RegionPasswordEnv+" environment variable.")
	fs.StringVar(&o.Mode, "region-redis-mode", regionStandalone, "With --region-rebalance: how every region's Redis is deployed: standalone, or cluster (each --region-redis address is one node of the region's Redis Cluster; a pass reads every master).")
	fs.BoolVar(&o.TLS, "region-redis-tls", false, "With --region-rebalance: connect to every region's Redis over TLS.")
	fs.StringVar(&o.TLSCAFile, "region-redis-tls-ca-file", "", "With --region-redis-tls: PEM file of the CA certificates that sign the regions' Redis certificates. Default: the system's roots.")
	fs.StringVar(&o.TLSServerName, "region-redis-tls-server-name", "", "With --region-redis-tls: the server name to verify in every region's Redis certificate. Default: the host of its address.")
	fs.DurationVar(&o.Interval, "region-interval", time.Minute, "With --region-rebalance: the time between two passes of the rebalancer.")
	fs.DurationVar(&o.ReadTimeout, "region-read-timeout", 5*time.Second, "With --region-rebalance: the longest a pass reads one region's Redis; a region that takes longer keeps its share.")
	fs.Int32Var(&o.Shares.Floor, "region-floor", regionshares.DefaultFloor, "With --region-rebalance: the least share of a region in percent, unless its rule sets spec.regions[].minPercent.")
	fs.Int32Var(&o.Shares.MaxStep, "region-max-step", regionshares.DefaultMaxStep, "With --region-rebalance: the most a share moves per pass, in percentage points.")
	fs.Float64Var(&o.Shares.Smoothing, "region-smoothing", regionshares.DefaultSmoothing, "With --region-rebalance: the weight of the newest pass's demand in the exponentially weighted average, in (0, 1].")
	fs.Int32Var(&o.Shares.Hysteresis, "region-hysteresis", regionshares.DefaultHysteresis, "With --region-rebalance: a change whose largest move is smaller than this many points is not made.")
	fs.DurationVar(&o.Shares.SilentAfter, "region-silent-after", regionshares.DefaultSilentAfter, "With --region-rebalance: a region whose gateways report no demand for this long decays to its floor.")
	fs.DurationVar(&o.Shares.ConfirmWithin, "region-confirm-within", regionshares.DefaultConfirmWithin,
		"With --region-rebalance: the longest a change waits for every lowered region's gateways to confirm the lower share before the growing regions get theirs (covers a region that cannot be reached; at least the gateways' snapshot propagation time).")
}

// RegionPasswordEnv holds the regions' Redis password without
// --region-redis-password-file.
const RegionPasswordEnv = "TOLLGATE_REGION_REDIS_PASSWORD"

// password is the regions' Redis password.
func (o *RegionOptions) password() (string, error) {
	if o.PasswordFile == "" {
		return os.Getenv(RegionPasswordEnv), nil
	}
	b, err := os.ReadFile(o.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("reading --region-redis-password-file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// The deployments --region-redis-mode names.
const (
	regionStandalone = "standalone"
	regionCluster    = "cluster"
)

// clients connects to every region's Redis (nothing is dialled before the
// first pass), with the options' user, password, mode and TLS.
func (o *RegionOptions) clients() (map[string]redis.UniversalClient, error) {
	password, err := o.password()
	if err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if o.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLSServerName}
		if o.TLSCAFile != "" {
			if tlsConfig.RootCAs, err = certpool.Load("--region-redis-tls-ca-file", o.TLSCAFile); err != nil {
				return nil, err
			}
		}
	}
	clients := make(map[string]redis.UniversalClient, len(o.Redis))
	for region, addr := range o.Redis {
		if !snapshot.ValidRegion(region) {
			return nil, fmt.Errorf("--region-redis: region %q: 1 to 32 characters of a-z, 0-9 and '-'", region)
		}
		u := &redis.UniversalOptions{Addrs: []string{addr}, Username: o.Username, Password: password, TLSConfig: tlsConfig,
			DialTimeout: o.ReadTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.ReadTimeout, Protocol: 2, DisableIdentity: true}
		if o.Mode == regionCluster {
			clients[region] = redis.NewClusterClient(u.Cluster())
		} else {
			clients[region] = redis.NewClient(u.Simple())
		}
	}
	return clients, nil
}

// Validate checks the options.
func (o *RegionOptions) Validate() error {
	if !o.Enabled {
		return nil
	}
	switch {
	case len(o.Redis) == 0:
		return fmt.Errorf("--region-rebalance needs --region-redis (the Redis of each region)")
	case o.Mode != "" && o.Mode != regionStandalone && o.Mode != regionCluster:
		return fmt.Errorf("--region-redis-mode %q: want standalone or cluster", o.Mode)
	case !o.TLS && (o.TLSCAFile != "" || o.TLSServerName != ""):
		return fmt.Errorf("--region-redis-tls-ca-file and --region-redis-tls-server-name need --region-redis-tls")
	case o.Interval < 100*time.Millisecond:
		return fmt.Errorf("--region-interval must be at least 100ms")
	case o.Shares.Floor < 1 || o.Shares.Floor > 50:
		return fmt.Errorf("--region-floor must be between 1 and 50")
	case o.Shares.MaxStep < 1 || o.Shares.MaxStep > 100:
		return fmt.Errorf("--region-max-step must be between 1 and 100")
	case o.Shares.Smoothing <= 0 || o.Shares.Smoothing > 1:
		return fmt.Errorf("--region-smoothing must be in (0, 1]")
	case o.Shares.Hysteresis < 1 || o.Shares.Hysteresis > 50:
		return fmt.Errorf("--region-hysteresis must be between 1 and 50")
	}
	return nil
}

// RuleStore is where the rebalancer reads rules and writes their shares:
// the API server (kubeRules) in the controller; a test or a tool may keep
// rules elsewhere.
type RuleStore interface {
	// List returns every RateLimitRule (the rebalancer reads those split
	// between regions). Called once per pass.
	List(ctx context.Context) ([]v1alpha1.RateLimitRule, error)
	// WriteStatus writes obj's status, which the rebalancer changed from
	// orig's (the version List returned); a conflict is an error, and the
	// next pass starts again from the newer version.
	WriteStatus(ctx context.Context, obj, orig *v1alpha1.RateLimitRule) error
}

// Rebalancer moves the region shares of rules from the demand measured in
// each region: one pass per interval (Run), in the leader only.
type Rebalancer struct {
	store   RuleStore
	regions map[string]redis.UniversalClient
	opts    RegionOptions
	// record, if set, makes an event of a change: obj, its reason
	// (RegionSharesLowered, RegionSharesRaised) and the message.
	record func(obj *v1alpha1.RateLimitRule, reason, msg string)
	clock  func() time.Time
	log    logr.Logger
}

// RebalancerConfig builds a Rebalancer.
type RebalancerConfig struct {
	Store   RuleStore
	Regions map[string]redis.UniversalClient
	Options RegionOptions
	// Recorder, if set, receives an event per change.
	Recorder events.EventRecorder
	// Clock: default time.Now. Tests move it.
	Clock func() time.Time
	Log   logr.Logger
}

// NewRebalancer returns a Rebalancer; its Redis clients are the caller's
// to close.
func NewRebalancer(c RebalancerConfig) *Rebalancer {
	r := &Rebalancer{store: c.Store, regions: c.Regions, opts: c.Options, clock: c.Clock, log: c.Log}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.opts.Interval <= 0 {
		r.opts.Interval = time.Minute
	}
	if r.opts.ReadTimeout <= 0 {
		r.opts.ReadTimeout = 5 * time.Second
	}
	if rec := c.Recorder; rec != nil {
		r.record = func(obj *v1alpha1.RateLimitRule, reason, msg string) {
			rec.Eventf(obj, nil, corev1.EventTypeNormal, reason, "Rebalance", "%s", msg)
		}
	}
	return r
}

// Start runs a pass every interval until ctx ends (a manager.Runnable).
func (r *Rebalancer) Start(ctx context.Context) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "region rebalancer pass")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection says the rebalancer runs in the leader only: two
// would move the same shares.
func (r *Rebalancer) NeedLeaderElection() bool { return true }

// Pass reads every region's demand once and advances each rule that
// follows the traffic by one step, writing the statuses that changed. A
// region whose Redis fails keeps every rule's share in it.
func (r *Rebalancer) Pass(ctx context.Context) error {
	items, err := r.store.List(ctx)
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	now := r.clock()
	var follow []*v1alpha1.RateLimitRule
	since := map[string]time.Time{}
	for i := range items {
		obj := &items[i]
		if !followsTraffic(obj) {
			continue
		}
		follow = append(follow, obj)
		if ch := obj.Status.RegionChange; ch != nil {
			since[ruleSource(obj)] = ch.Since.Time
		}
	}
	if len(follow) == 0 {
		return nil
	}
	obs := r.observe(ctx, since)
	var errs []error
	for _, obj := range follow {
		if err := r.step(ctx, obj, obs, now); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d rules not written, the first: %w", len(errs), errs[0])
	}
	return nil
}

// demand is one pass's reading of every region: per rule (source) and
// region the observation Step takes, and which regions answered.
type demand struct {
	rules     map[string]map[string]regionshares.Observation
	reachable map[string]bool
}

// of is what Step takes for the rule src in the regions it lists: a
// reachable region without a ring of the rule is reachable and silent,
// one that failed is absent (unreachable).
func (d *demand) of(src string, regions []v1alpha1.RegionShare) map[string]regionshares.Observation {
	out := make(map[string]regionshares.Observation, len(regions))
	for _, g := range regions {
		if !d.reachable[g.Name] {
			continue
		}
		o, ok := d.rules[src][g.Name]
		if !ok {
			o = regionshares.Observation{Reachable: true}
		}
		out[g.Name] = o
	}
	return out
}

// observe reads every region's Redis, one after the other, each within
// ReadTimeout.
func (r *Rebalancer) observe(ctx context.Context, since map[string]time.Time) *demand {
	d := &demand{rules: map[string]map[string]regionshares.Observation{}, reachable: map[string]bool{}}
	names := make([]string, 0, len(r.regions))
	for name := range r.regions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rctx, cancel := context.WithTimeout(ctx, r.opts.ReadTimeout)
		readings, err := readRegion(rctx, r.regions[name], name, r.opts.Interval, since)
		cancel()
		if err != nil {
			regionReadFailures.WithLabelValues(name).Inc()
			r.log.Info("region unreachable: its shares stay", "region", name, "error", err.Error())
			continue
		}
		d.reachable[name] = true
		for rule, rd := range readings {
			if d.rules[rule] == nil {
				d.rules[rule] = map[string]regionshares.Observation{}
			}
			d.rules[rule][name] = rd.Observation()
		}
	}
	return d
}

// ruleSource names a rule as its rings do: "namespace/name".
func ruleSource(obj *v1alpha1.RateLimitRule) string {
	return obj.Namespace + "/" + obj.Name
}

// followsTraffic reports whether obj's shares are the rebalancer's to move.
func followsTraffic(obj *v1alpha1.RateLimitRule) bool {
	return len(obj.Spec.Regions) > 1 && obj.Spec.RegionSplit != v1alpha1.RegionSplitFixed && obj.DeletionTimestamp == nil
}

// kubeRules is the RuleStore of the controller: the manager's cache, and
// status patches with optimistic locking.
type kubeRules struct {
	client client.Client
}

func (k kubeRules) List(ctx context.Context) ([]v1alpha1.RateLimitRule, error) {
	var list v1alpha1.RateLimitRuleList
	if err := k.client.List(ctx, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (k kubeRules) WriteStatus(ctx context.Context, obj, orig *v1alpha1.RateLimitRule) error {
	return k.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}
