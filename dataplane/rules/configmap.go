package rules

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate-dev/tollgate/internal/lib/kubewatch"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// ConfigMapOptions configures a ConfigMapSource.
type ConfigMapOptions struct {
	// Namespace holds the snapshot's ConfigMaps. Required.
	Namespace string
	// SnapshotName is the snapshot's name: the value of the
	// snapshot.LabelSnapshot label on its ConfigMaps. Required.
	SnapshotName string
	// ResyncPeriod is the informer's resync period; zero disables resyncs.
	// A resync of an unchanged ConfigMap costs no decoding.
	ResyncPeriod time.Duration
	// OnReload, if set, is called after each snapshot the source swaps into
	// the store. Callbacks are never called concurrently.
	OnReload func(*snapshot.Set)
	// OnError, if set, is called when a ConfigMap cannot be decoded or its
	// version goes backwards (its last good content stays in use), when the
	// shards do not make a complete snapshot or make one older than the
	// current one (the current one stays in force), and when listing or
	// watching fails (the informer retries).
	OnError func(error)
	// OnForeign, if set, is called when a ConfigMap carrying the snapshot's
	// label is not the controller's (snapshot.Owned: the name
	// <snapshot>-<i>-of-<n> and the controller's managed-by label): it is
	// refused, whatever its version, and content it held while it was the
	// controller's is no longer used. Without OnForeign, OnError hears it.
	OnForeign func(cm *corev1.ConfigMap, err error)
}

// ConfigMapSource keeps a Store loaded from the sharded snapshot that the
// controller publishes in ConfigMaps. It watches the ConfigMaps of one
// namespace that carry the snapshot's label, so it needs only get, list and
// watch on configmaps in that namespace.
//
// Only ConfigMaps the controller owns (snapshot.Owned, the rule the
// controller itself applies) are loaded; any other carrying the label is
// refused and reported (OnForeign), so a layout the controller neither
// updates nor deletes can never be in force, whatever its version.
//
// Every ConfigMap is decoded when it changes, off the request path, and the
// newest complete snapshot (see snapshot.Select) is swapped into the store.
// A ConfigMap that fails to decode keeps serving its last good content, and
// one that disappears is forgotten; a change that leaves no complete
// snapshot keeps the current one in force. Versions never go backwards: a
// shard whose version is lower than its last good one is refused, and so is
// a complete snapshot older than the one in force (both are reported through
// OnError). Decoding is bounded (snapshot.MaxDecodedBytes), so a crafted
// ConfigMap that inflates to gigabytes is refused, not loaded.
type ConfigMapSource struct {
	client kubernetes.Interface
	store  *Store
	opts   ConfigMapOptions
	synced atomic.Bool

	mu      sync.Mutex // serializes event handling
	shards  map[string]*entry
	applied *snapshot.Set // the last set this source put in the store
	listed  bool          // the initial list has been handled
}

// entry is what is known of one ConfigMap.
type entry struct {
	// rv is the resourceVersion last decoded, good or not.
	rv string
	// good is the last content that decoded; nil if none did.
	good *snapshot.Shard
}

// NewConfigMapSource returns a source that loads store from the snapshot
// ConfigMaps that client can see, once Run is called.
func NewConfigMapSource(client kubernetes.Interface, store *Store, opts ConfigMapOptions) *ConfigMapSource {
	return &ConfigMapSource{client: client, store: store, opts: opts, shards: map[string]*entry{}}
}

// HasSynced reports whether the source has loaded every ConfigMap that
// existed when Run started (whether or not they made a valid snapshot; see
// Store.Loaded for that).
func (s *ConfigMapSource) HasSynced() bool {
	return s.synced.Load()
}

// Loaded reports whether the store holds a complete snapshot, from these
// ConfigMaps or before them.
func (s *ConfigMapSource) Loaded() bool { return s.store.Loaded() }

// Run watches the snapshot's ConfigMaps until ctx is done. Callbacks run on
// the informer's goroutine. Run fails if the options are incomplete or ctx
// ends before the initial list is loaded. Call it once.
func (s *ConfigMapSource) Run(ctx context.Context) error {
	if s.opts.Namespace == "" || s.opts.SnapshotName == "" {
		return errors.New("snapshot ConfigMap source: Namespace and SnapshotName are required")
	}
	if msgs := validation.IsValidLabelValue(s.opts.SnapshotName); len(msgs) > 0 {
		return fmt.Errorf("snapshot name %q: %s", s.opts.SnapshotName, strings.Join(msgs, "; "))
	}
	selector := labels.SelectorFromSet(labels.Set{snapshot.LabelSnapshot: s.opts.SnapshotName}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, s.opts.ResyncPeriod,
		informers.WithNamespace(s.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		informers.WithTransform(dropManagedFields),
	)
	informer := factory.Core().V1().ConfigMaps().Informer()
	if err := informer.SetWatchErrorHandlerWithContext(s.watchError); err != nil {
		return fmt.Errorf("snapshot ConfigMap informer: %w", err)
	}
	reg, err := informer.AddEventHandler(handler{s})
	if err != nil {
		return fmt.Errorf("snapshot ConfigMap informer: %w", err)
	}
	factory.StartWithContext(ctx)
	defer factory.Shutdown()

	select {
	case <-reg.HasSyncedChecker().Done():
	case <-ctx.Done():
		return fmt.Errorf("snapshot ConfigMaps in namespace %s were not listed: %w", s.opts.Namespace, ctx.Err())
	}
	s.listDone()
	<-ctx.Done()
	return nil
}

// listDone assembles the shards of the initial list. It is done once, here,
// rather than after each shard: a partly listed layout is not an error.
func (s *ConfigMapSource) listDone() {
	s.mu.Lock()
	s.listed = true
	s.update()
	s.mu.Unlock()
	s.synced.Store(true)
}

// handler receives the informer's events.
type handler struct{ s *ConfigMapSource }

func (h handler) OnAdd(obj any, _ bool)  { h.s.upsert(obj) }
func (h handler) OnUpdate(_, newObj any) { h.s.upsert(newObj) }
func (h handler) OnDelete(obj any)       { h.s.remove(obj) }

// dropManagedFields saves the informer cache the objects' managed fields,
// which nothing here reads.
func dropManagedFields(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.ManagedFields = nil
	}
	return obj, nil
}

// upsert decodes an added or changed ConfigMap.
func (s *ConfigMapSource) upsert(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.shards[cm.Name]
	if e != nil && e.rv == cm.ResourceVersion {
		return // a resync: nothing changed
	}
	if e == nil {
		e = &entry{}
		s.shards[cm.Name] = e
	}
	e.rv = cm.ResourceVersion
	if !snapshot.Owned(s.opts.SnapshotName, cm) {
		s.refuse(cm, e)
		return
	}
	sh, err := snapshot.FromConfigMap(cm)
	if err != nil {
		what := "ignored until it is fixed"
		if e.good != nil {
			what = fmt.Sprintf("its last good content (version %d) stays in use", e.good.Version)
		}
		s.report(fmt.Errorf("snapshot ConfigMap %s/%s rejected, %s: %w", cm.Namespace, cm.Name, what, err))
		return
	}
	if e.good != nil && sh.Version < e.good.Version {
		// The controller only ever raises a shard's version: a lower one is
		// an old shard put back (by hand, or replayed by someone who can
		// write ConfigMaps), not a newer snapshot.
		s.report(fmt.Errorf("snapshot ConfigMap %s/%s rejected, its last good content (version %d) stays in use: version %d goes backwards",
			cm.Namespace, cm.Name, e.good.Version, sh.Version))
		return
	}
	e.good = sh
	if s.listed {
		s.update()
	}
}

// refuse reports cm, which the controller does not own, and forgets what
// its entry e held. s.mu is held.
func (s *ConfigMapSource) refuse(cm *corev1.ConfigMap, e *entry) {
	what := "gateways do not load it"
	had := e.good != nil
	if had {
		what = fmt.Sprintf("its content (version %d) is no longer used", e.good.Version)
		e.good = nil
	}
	err := fmt.Errorf("snapshot ConfigMap %s/%s refused, %s: it is not the controller's (gateways load only ConfigMaps named %s-<i>-of-<n> and labelled %s=%s)",
		cm.Namespace, cm.Name, what, s.opts.SnapshotName, snapshot.LabelManagedBy, snapshot.ManagedByValue)
	if s.opts.OnForeign != nil {
		s.opts.OnForeign(cm, err)
	} else {
		s.report(err)
	}
	if had && s.listed {
		s.update()
	}
}

// remove forgets a deleted ConfigMap.
func (s *ConfigMapSource) remove(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.shards[cm.Name]; !known {
		return
	}
	delete(s.shards, cm.Name)
	if s.listed {
		s.update()
	}
}

// update assembles the newest complete snapshot from the good shards and
// swaps it in if it differs from the one in force. s.mu is held.
func (s *ConfigMapSource) update() {
	shards := make([]*snapshot.Shard, 0, len(s.shards))
	for _, e := range s.shards {
		if e.good != nil {
			shards = append(shards, e.good)
		}
	}
	set, err := snapshot.Select(shards)
	if err != nil {
		what := "no rules are loaded yet"
		if s.applied != nil {
			what = fmt.Sprintf("version %d stays in force", s.applied.Version())
		}
		s.report(fmt.Errorf("snapshot %s in namespace %s: %w; %s", s.opts.SnapshotName, s.opts.Namespace, err, what))
		return
	}
	if sameSnapshot(set, s.applied) {
		return
	}
	if s.applied != nil && set.Version() < s.applied.Version() {
		s.report(fmt.Errorf("snapshot %s in namespace %s: version %d goes backwards; version %d stays in force (restart the gateway to accept an older snapshot)",
			s.opts.SnapshotName, s.opts.Namespace, set.Version(), s.applied.Version()))
		return
	}
	s.applied = set
	s.store.Replace(set)
	if s.opts.OnReload != nil {
		s.opts.OnReload(set)
	}
}

// sameSnapshot reports whether a and b have the same version and rules.
func sameSnapshot(a, b *snapshot.Set) bool {
	if a == nil || b == nil || a.Version() != b.Version() || a.Count() != b.Count() {
		return false
	}
	bs := b.Shards()
	for i, sh := range a.Shards() {
		if sh.Checksum != bs[i].Checksum {
			return false
		}
	}
	return true
}

// watchError reports list and watch failures, except the routine ends of a
// watch that the informer recovers from silently.
func (s *ConfigMapSource) watchError(_ context.Context, _ *cache.Reflector, err error) {
	if kubewatch.RoutineEnd(err) {
		return
	}
	s.mu.Lock() // callbacks never run concurrently
	defer s.mu.Unlock()
	s.report(fmt.Errorf("watching snapshot ConfigMaps in namespace %s: %w", s.opts.Namespace, err))
}

func (s *ConfigMapSource) report(err error) {
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}
