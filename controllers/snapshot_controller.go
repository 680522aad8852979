package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// SnapshotReconciler compiles every RateLimitRule into the rule snapshot and
// publishes it as shard ConfigMaps. All events map to one work item, so a
// burst of rule changes collapses into few passes, and each pass writes only
// the shards whose rules changed.
type SnapshotReconciler struct {
	client    client.Client
	apiReader client.Reader // reads shard ConfigMaps uncached
	opts      Options
	recorder  events.EventRecorder
	state     *publishedState
	statusQ   *statusQueue

	// writtenMu guards written, which the ConfigMap predicate reads.
	writtenMu sync.Mutex
	// written remembers the resourceVersion and checksum of every shard this
	// process wrote or verified, so an unchanged shard is recognised without
	// decoding it and the watch event of our own write is ignored.
	written map[string]writtenShard
	// maxVersion is the highest shard version seen or written.
	maxVersion int64
	// lastEnd and lastDuration describe the previous pass; see Reconcile.
	lastEnd      time.Time
	lastDuration time.Duration
}

type writtenShard struct {
	resourceVersion string
	checksum        string
}

// Reconcile runs one snapshot pass. The request is always the same fixed key.
//
// While rules change continuously (a GitOps sync of thousands of rules),
// passes are spaced by at least the duration of the previous pass: the
// controller then spends at most half its time compiling, leaving the API
// server room, and a change still reaches the snapshot within about two pass
// durations.
func (r *SnapshotReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if wait := r.lastDuration - time.Since(r.lastEnd); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	defer func(start time.Time) {
		r.lastEnd, r.lastDuration = time.Now(), time.Since(start)
	}(time.Now())
	var list v1alpha1.RateLimitRuleList
	// The list is only read, so the cache's objects are used without copies.
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing RateLimitRules: %w", err)
	}
	return reconcile.Result{}, r.sync(ctx, list.Items)
}

// sync compiles items, publishes the snapshot and updates the rule states.
func (r *SnapshotReconciler) sync(ctx context.Context, items []v1alpha1.RateLimitRule) error {
	start := time.Now()
	c := compile(items)
	pub, err := r.publish(ctx, c.Rules)
	if err != nil {
		return err
	}
	r.updateState(c, pub)
	elapsed := time.Since(start)
	publishDuration.Observe(elapsed.Seconds())
	log.FromContext(ctx).V(1).Info("published snapshot", "rules", len(items), "accepted", len(c.Rules),
		"shards", pub.count, "writes", pub.writes, "version", r.maxVersion, "duration", elapsed)
	return nil
}

// published describes the snapshot as written.
type published struct {
	count    int
	writes   int
	versions []int64 // by shard index
}

// publish writes the shards of rules, creating or updating only those whose
// content changed, then deletes shards of an old layout. New shards are
// written before old ones are deleted, so a reader always finds one complete
// layout.
func (r *SnapshotReconciler) publish(ctx context.Context, rules []snapshot.Rule) (published, error) {
	// Shard metadata is read from the API server, not the cache: a cache that
	// has not yet seen our last write would make every update conflict.
	var metas metav1.PartialObjectMetadataList
	metas.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := r.apiReader.List(ctx, &metas, client.InNamespace(r.opts.SnapshotNamespace),
		client.MatchingLabels{snapshot.LabelSnapshot: r.opts.SnapshotName}); err != nil {
		return published{}, fmt.Errorf("listing snapshot ConfigMaps: %w", err)
	}
	existing := make(map[string]*metav1.PartialObjectMetadata, len(metas.Items))
	current := 0
	var currentVersion int64 = -1
	for i := range metas.Items {
		m := &metas.Items[i]
		existing[m.Name] = m
		if v, ok := annotationInt(m, snapshot.AnnotationVersion); ok {
			r.maxVersion = max(r.maxVersion, v)
			if n, ok := annotationInt(m, snapshot.AnnotationCount); ok && v > currentVersion {
				current, currentVersion = int(n), v
			}
		}
	}

	count := snapshot.ShardCount(len(rules), current)
	for {
		pub, writes, err := r.plan(ctx, rules, count, existing)
		if errors.Is(err, snapshot.ErrTooLarge) {
			if count >= snapshot.MaxShards {
				return published{}, fmt.Errorf("%d rules do not fit in %d shards", len(rules), count)
			}
			count *= 2
			continue
		}
		if err != nil {
			return published{}, err
		}
		if err := r.apply(ctx, writes, existing, count); err != nil {
			return published{}, err
		}
		pub.writes = len(writes)
		return pub, nil
	}
}

// plan decides which shards to write for rules in count shards.
func (r *SnapshotReconciler) plan(ctx context.Context, rules []snapshot.Rule, count int, existing map[string]*metav1.PartialObjectMetadata) (published, []*corev1.ConfigMap, error) {
	parts := snapshot.Partition(rules, count)
	pub := published{count: count, versions: make([]int64, count)}
	next := r.maxVersion + 1
	var writes []*corev1.ConfigMap
	for i, part := range parts {
		sh := snapshot.NewShard(i, count, 0, part)
		name := snapshot.ConfigMapName(r.opts.SnapshotName, i, count)
		if m, ok := existing[name]; ok && r.unchanged(ctx, m, sh) {
			pub.versions[i], _ = annotationInt(m, snapshot.AnnotationVersion)
			continue
		}
		sh.Version = next
		cm, err := sh.ConfigMap(r.opts.SnapshotNamespace, r.opts.SnapshotName)
		if err != nil {
			return published{}, nil, err
		}
		writes = append(writes, cm)
		pub.versions[i] = next
	}
	return pub, writes, nil
}

// unchanged reports whether the ConfigMap described by m already holds
// exactly the rules of sh. A shard this process wrote is recognised by its
// resourceVersion; any other (after a restart, or edited by hand) is read and
// decoded, so a corrupted shard is rewritten.
func (r *SnapshotReconciler) unchanged(ctx context.Context, m *metav1.PartialObjectMetadata, sh *snapshot.Shard) bool {
	if m.Annotations[snapshot.AnnotationChecksum] != sh.Checksum {
		return false
	}
	r.writtenMu.Lock()
	w, ok := r.written[m.Name]
	r.writtenMu.Unlock()
	if ok && w.resourceVersion == m.ResourceVersion && w.checksum == sh.Checksum {
		return true
	}
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(m), &cm); err != nil {
		return false
	}
	got, err := snapshot.FromConfigMap(&cm)
	if err != nil || got.Checksum != sh.Checksum {
		return false
	}
	r.remember(cm.Name, cm.ResourceVersion, sh.Checksum)
	return true
}

func (r *SnapshotReconciler) remember(name, resourceVersion, checksum string) {
	r.writtenMu.Lock()
	r.written[name] = writtenShard{resourceVersion: resourceVersion, checksum: checksum}
	r.writtenMu.Unlock()
}

// apply performs the writes, then deletes every shard not in the layout of
// count shards.
func (r *SnapshotReconciler) apply(ctx context.Context, writes []*corev1.ConfigMap, existing map[string]*metav1.PartialObjectMetadata, count int) error {
	for _, cm := range writes {
		op := "create"
		if old, ok := existing[cm.Name]; ok {
			op = "update"
			cm.ResourceVersion = old.ResourceVersion
			if err := r.client.Update(ctx, cm); err != nil {
				return fmt.Errorf("updating ConfigMap %s: %w", cm.Name, err)
			}
		} else if err := r.client.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating ConfigMap %s: %w", cm.Name, err)
		}
		configMapWrites.WithLabelValues(op).Inc()
		r.remember(cm.Name, cm.ResourceVersion, cm.Annotations[snapshot.AnnotationChecksum])
		v, _ := annotationInt(cm, snapshot.AnnotationVersion)
		r.maxVersion = max(r.maxVersion, v)
	}
	keep := make(map[string]bool, count)
	for i := 0; i < count; i++ {
		keep[snapshot.ConfigMapName(r.opts.SnapshotName, i, count)] = true
	}
	for name, m := range existing {
		if keep[name] {
			continue
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace}}
		if err := r.client.Delete(ctx, cm, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting stale ConfigMap %s: %w", name, err)
		}
		configMapWrites.WithLabelValues("delete").Inc()
		r.writtenMu.Lock()
		delete(r.written, name)
		r.writtenMu.Unlock()
	}
	snapshotShards.Set(float64(count))
	snapshotVersion.Set(float64(r.maxVersion))
	return nil
}

// updateState records what each rule's status should say and hands the
// rules whose state changed to the status reconciler.
func (r *SnapshotReconciler) updateState(c compiled, pub published) {
	prev := r.state.snapshot()
	next := make(map[types.UID]ruleState, len(c.Verdicts))
	var accepted, conflicts, invalid float64
	var changed []types.NamespacedName
	for uid, v := range c.Verdicts {
		st := ruleState{verdict: v}
		p, seen := prev[uid]
		switch {
		case v.Accepted:
			accepted++
			if seen && p.Accepted && p.Generation == v.Generation && p.PublishedVersion > 0 {
				st.PublishedVersion = p.PublishedVersion
			} else {
				st.PublishedVersion = pub.versions[snapshot.ShardIndex(v.tenant, pub.count)]
			}
		case v.Reason == v1alpha1.ReasonConflict:
			conflicts++
			if !seen || p.Reason != v.Reason || p.Message != v.Message {
				r.recorder.Eventf(c.Objects[uid], nil, corev1.EventTypeWarning, v1alpha1.ReasonConflict, "Compile", "%s", v.Message)
			}
		default:
			invalid++
		}
		next[uid] = st
		if !seen || p != st {
			obj := c.Objects[uid]
			changed = append(changed, types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name})
		}
	}
	// The new state first, then the names: a status worker that picked a
	// name up before the state was replaced would find nothing to write,
	// and nobody would enqueue the rule again.
	r.state.replace(next)
	for _, nn := range changed {
		r.statusQ.add(nn)
	}
	rulesByState.WithLabelValues("accepted").Set(accepted)
	rulesByState.WithLabelValues("conflict").Set(conflicts)
	rulesByState.WithLabelValues("invalid").Set(invalid)
}

// isOwnWrite reports whether a ConfigMap event shows a version this process
// wrote, so the write does not trigger another pass.
func (r *SnapshotReconciler) isOwnWrite(obj client.Object) bool {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	w, ok := r.written[obj.GetName()]
	return ok && w.resourceVersion == obj.GetResourceVersion()
}

func (r *SnapshotReconciler) setupWithManager(mgr ctrl.Manager) error {
	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.opts.SnapshotNamespace, Name: r.opts.SnapshotName}}
	toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{key}
	})
	shardEvents := predicate.Funcs{
		// Only shards of our snapshot matter (the cache is already filtered
		// by label; this also guards a cache configured more widely).
		CreateFunc: func(e event.CreateEvent) bool { return r.isShard(e.Object) && !r.isOwnWrite(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return r.isShard(e.ObjectNew) && !r.isOwnWrite(e.ObjectNew) },
		// A deleted shard is always repaired, even one we deleted: the pass
		// that follows finds nothing to do.
		DeleteFunc:  func(e event.DeleteEvent) bool { return r.isShard(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	// One pass at start, so a snapshot exists (possibly empty) even before
	// the first rule: gateways become ready on it.
	initial := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(key)
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitrule-snapshot").
		WatchesRawSource(initial).
		// Status writes do not change generation; only spec changes, creates
		// and deletes can change the snapshot.
		Watches(&v1alpha1.RateLimitRule{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Shards are watched by metadata only, so the cache does not hold
		// every rule twice.
		WatchesMetadata(&corev1.ConfigMap{}, toKey, builder.WithPredicates(shardEvents)).
		Complete(r)
}

func (r *SnapshotReconciler) isShard(obj client.Object) bool {
	return obj.GetNamespace() == r.opts.SnapshotNamespace && obj.GetLabels()[snapshot.LabelSnapshot] == r.opts.SnapshotName
}
