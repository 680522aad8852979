// Package membership counts the live gateway replicas of a group, so that
// each gateway can enforce its share (capacity/N, rate/N) of a limit with a
// local token bucket while Redis is unavailable.
//
// Every gateway holds a coordination.k8s.io/v1 Lease named after its group and
// identity, labelled LabelGroup=<group>, and renews it. It watches the group's
// Leases through a namespace-scoped informer and counts those still live.
// Other pods' clocks are not trusted: as in client-go leader election, a Lease
// is live while less than its leaseDurationSeconds has passed, on the local
// clock, since its renewTime was last seen to change. A Lease seen for the
// first time is judged by its renewTime against the local clock, so Leases
// left behind by pods that died long ago do not count.
//
// The count survives an unreachable API server: when this gateway's view of
// the Leases cannot be confirmed current (see Options.LeaseDuration), the
// count is frozen at its last value rather than letting every other Lease
// appear to expire.
//
// The gateway's service account needs get, list, watch, create, update and
// delete on leases in Options.Namespace only. RBAC cannot narrow update and
// delete to this gateway's own Lease (its name follows the pod's), so the
// chart and config/rbac add a ValidatingAdmissionPolicy that admits the
// gateway's writes only to Leases labelled with its group, named
// <group>-<pod> and held by the calling pod: the controller's leader
// election Lease in the same namespace stays out of reach.
package membership

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// LabelGroup is the label that marks a Lease as a member of a gateway group;
// its value is the sanitized Options.Group.
const LabelGroup = "ratelimit.tollgate.dev/gateway-group"

// Defaults for the zero values of Options.
const (
	// DefaultLeaseDuration is the default Options.LeaseDuration.
	DefaultLeaseDuration = 6 * time.Second
	// DefaultRenewInterval is the default Options.RenewInterval.
	DefaultRenewInterval = 2 * time.Second
	// DefaultRecountInterval is the default Options.RecountInterval.
	DefaultRecountInterval = 500 * time.Millisecond
)

// Options configures a Membership. Namespace and Group are required.
type Options struct {
	// Namespace holds the Leases.
	Namespace string
	// Group names the set of gateways that share limits, for example the
	// Helm release.
	Group string
	// Identity names this gateway, normally its pod name; default: hostname.
	Identity string
	// LeaseDuration is how long a Lease stays live without being renewed;
	// rounded up to whole seconds, as Leases store seconds. Default 6s. When
	// this gateway has not seen one of its own renewals for half of it (the
	// API server is unreachable, or the watch is broken) the count freezes,
	// and it resumes once a renewal shows up again. Half, not all of it: the
	// other Leases' last renewals were seen up to RenewInterval earlier than
	// ours, so they would start to expire before a full LeaseDuration.
	LeaseDuration time.Duration
	// RenewInterval is how often the own Lease is renewed; default 2s, at
	// most LeaseDuration/3.
	RenewInterval time.Duration
	// RecountInterval is how often the live Leases are counted; default
	// 500ms.
	RecountInterval time.Duration
	// Clock gives the local time; default time.Now. Tests skew it.
	Clock func() time.Time
	// OnChange, if set, is called with the new count whenever it changes
	// (and at the first count), from a single goroutine of Run, for example
	// to update a gauge.
	OnChange func(n int)
	// Logger receives infrequent messages (renewal failures, freezes); the
	// zero value discards them.
	Logger logr.Logger
	// UntilCounted is the count Replicas reports until the Leases have been
	// counted once (at start, or when Lease access is missing or the API
	// server is unreachable from the start). A replica that assumed 1 would
	// enforce the whole limit on its own in the fallback; a count too high
	// only makes the fallback stricter. Default 1.
	UntilCounted int
	// KeepLeaseOnStop leaves the Lease in place when Run returns instead of
	// deleting it, as a crashed pod would; for tests and crash simulation.
	KeepLeaseOnStop bool
	// Annotations are set on the Lease at every renewal: the gateway
	// publishes its admin port there (AnnotationAdminPort), for
	// `tollgate top` and `kubectl tollgate` (List).
	Annotations map[string]string
}

// Membership maintains this gateway's Lease and counts the live Leases of
// its group. Create it with New and start it with Run.
type Membership struct {
	client    kubernetes.Interface
	opts      Options
	leaseName string
	groupVal  string
	n         atomic.Int64
	started   atomic.Bool

	renewal renewState

	mu       sync.Mutex
	seen     map[string]observation
	runStart time.Time // renewTimes from this run are not before this
	fresh    time.Time // local time our latest renewal was seen in the cache
	counting bool      // the view was current at the last recount
	counted  bool      // it ever was
}

// observation is what is known about one Lease.
type observation struct {
	renew time.Time     // its renewTime; zero if unset
	at    time.Time     // local time it is considered renewed at
	dur   time.Duration // its leaseDurationSeconds
}

var _ Counter = (*Membership)(nil)

// New checks opts, fills in defaults and returns a Membership reporting
// Options.UntilCounted until Run has counted.
func New(client kubernetes.Interface, opts Options) (*Membership, error) {
	if client == nil {
		return nil, errors.New("membership: nil client")
	}
	if opts.Namespace == "" || opts.Group == "" {
		return nil, errors.New("membership: Namespace and Group are required")
	}
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("membership: default identity: %w", err)
		}
		opts.Identity = host
	}
	if opts.LeaseDuration < 0 || opts.RenewInterval < 0 || opts.RecountInterval < 0 {
		return nil, errors.New("membership: negative duration")
	}
	secs := (orDefault(opts.LeaseDuration, DefaultLeaseDuration) + time.Second - 1) / time.Second
	opts.LeaseDuration = secs * time.Second
	opts.RenewInterval = orDefault(opts.RenewInterval, DefaultRenewInterval)
	opts.RecountInterval = orDefault(opts.RecountInterval, DefaultRecountInterval)
	if 3*opts.RenewInterval > opts.LeaseDuration {
		return nil, fmt.Errorf("membership: RenewInterval %v exceeds LeaseDuration/3 (%v)",
			opts.RenewInterval, opts.LeaseDuration)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	m := &Membership{
		client:    client,
		opts:      opts,
		leaseName: dnsLabel(opts.Group + "-" + opts.Identity),
		groupVal:  dnsLabel(opts.Group),
		seen:      map[string]observation{},
	}
	m.n.Store(int64(max(1, opts.UntilCounted)))
	return m, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Replicas is the number of live replicas of the group, this one included;
// at least 1. It is an atomic read.
func (m *Membership) Replicas() int { return int(m.n.Load()) }

// LeaseName is the name of this gateway's Lease.
func (m *Membership) LeaseName() string { return m.leaseName }

// Run renews the Lease and counts the group until ctx is cancelled, then
// deletes the Lease (best effort, unless KeepLeaseOnStop) and returns nil.
// It returns an error only if it cannot start; it may be called only once.
func (m *Membership) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("membership: Run called twice")
	}
	m.mu.Lock()
	m.runStart = m.opts.Clock().Truncate(time.Microsecond)
	m.mu.Unlock()

	factory := informers.NewSharedInformerFactoryWithOptions(m.client, 0,
		informers.WithNamespace(m.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelGroup + "=" + m.groupVal }))
	inf := factory.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.observe,
		UpdateFunc: func(_, obj any) { m.observe(obj) },
		DeleteFunc: m.forget,
	}); err != nil {
		return fmt.Errorf("membership: watch leases: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(runCtx.Done())

	var wg sync.WaitGroup
	wg.Go(func() { m.every(runCtx, m.opts.RenewInterval, func() { m.renew(runCtx) }) })
	wg.Go(func() {
		m.every(runCtx, m.opts.RecountInterval, func() {
			if inf.HasSynced() {
				m.recount()
			}
		})
	})
	<-ctx.Done()
	wg.Wait()
	factory.Shutdown()
	if !m.opts.KeepLeaseOnStop {
		m.release(context.WithoutCancel(ctx))
	}
	return nil
}

// every calls f now and then every d until ctx is done.
func (m *Membership) every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observe records a Lease added or updated in the cache.
func (m *Membership) observe(obj any) {
	l, ok := obj.(*coordv1.Lease)
	if !ok {
		return
	}
	now := m.opts.Clock()
	o := observation{dur: m.opts.LeaseDuration}
	if l.Spec.RenewTime != nil {
		o.renew = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		o.dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, known := m.seen[l.Name]
	changed := !known || !old.renew.Equal(o.renew)
	switch {
	case !changed:
		o.at = old.at
	case known:
		o.at = now
	case o.renew.After(now):
		o.at = now // renewed "in the future": a clock ahead of ours
	default:
		o.at = o.renew // zero (never live) if unset
	}
	m.seen[l.Name] = o
	if l.Name == m.leaseName && changed && !o.renew.Before(m.runStart) {
		m.fresh = now // our own renewal from this run: the cache is current
	}
}

// forget drops a deleted Lease.
func (m *Membership) forget(obj any) {
	name := ""
	switch o := obj.(type) {
	case *coordv1.Lease:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		_, name, _ = cache.SplitMetaNamespaceKey(o.Key)
	}
	m.mu.Lock()
	delete(m.seen, name)
	m.mu.Unlock()
}

// recount counts the live Leases, unless the view is not known to be
// current, in which case the count stays frozen.
func (m *Membership) recount() {
	now := m.opts.Clock()
	m.mu.Lock()
	stale := m.fresh.IsZero() || now.Sub(m.fresh) > m.opts.LeaseDuration/2
	n := 1 // this gateway
	for name, o := range m.seen {
		if !stale && name != m.leaseName && !o.at.IsZero() && now.Sub(o.at) < o.dur {
			n++
		}
	}
	was := m.counting
	resumed := m.counted && !stale && !was
	first := !m.counted && !stale
	m.counting = !stale
	m.counted = m.counted || !stale
	m.mu.Unlock()

	if stale {
		if was {
			m.opts.Logger.Info("cannot confirm the lease view is current; replica count frozen", "replicas", m.Replicas())
		}
		return
	}
	if resumed {
		m.opts.Logger.Info("lease view is current again; counting replicas", "replicas", n)
	}
	if old := m.n.Swap(int64(n)); (old != int64(n) || first) && m.opts.OnChange != nil {
		m.opts.OnChange(n)
	}
}
