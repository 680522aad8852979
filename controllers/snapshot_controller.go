package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

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
	// maxVersion is the highest shard version seen in a valid shard, or
	// written.
	maxVersion int64
	// foreign holds the ConfigMaps already reported as foreign.
	foreign map[types.UID]bool
	// lastEnd and lastDuration describe the previous pass; see Reconcile.
	lastEnd      time.Time
	lastDuration time.Duration
	// nextExpiry is the earliest spec.expiresAt still to come after the
	// last pass (zero: none); Reconcile asks for a pass then.
	nextExpiry time.Time
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
	policy, err := r.tenantPolicy(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var targets *targetObjects
	if r.opts.GatewayAPI {
		if targets, err = r.listTargets(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.sync(ctx, list.Items, policy, targets); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.untilExpiry()}, nil
}

// listTargets lists the HTTPRoutes, GRPCRoutes and Gateways that
// RateLimitRules attach to with spec.targetRef.
func (r *SnapshotReconciler) listTargets(ctx context.Context) (*targetObjects, error) {
	var hrs gwv1.HTTPRouteList
	var grs gwv1.GRPCRouteList
	var gws gwv1.GatewayList
	for _, l := range []client.ObjectList{&hrs, &grs, &gws} {
		if err := r.client.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing %T for RateLimitRule targetRefs: %w", l, err)
		}
	}
	t := &targetObjects{
		routes:   make(map[types.NamespacedName]*gwv1.HTTPRoute, len(hrs.Items)),
		grpc:     make(map[types.NamespacedName]*gwv1.GRPCRoute, len(grs.Items)),
		gateways: make(map[types.NamespacedName]*gwv1.Gateway, len(gws.Items)),
	}
	for i := range hrs.Items {
		t.routes[client.ObjectKeyFromObject(&hrs.Items[i])] = &hrs.Items[i]
	}
	for i := range grs.Items {
		t.grpc[client.ObjectKeyFromObject(&grs.Items[i])] = &grs.Items[i]
	}
	for i := range gws.Items {
		t.gateways[client.ObjectKeyFromObject(&gws.Items[i])] = &gws.Items[i]
	}
	return t, nil
}

// untilExpiry is the time until the next rule expires (0: none), so that
// a pass then takes it out of the snapshot without any event: nobody
// deletes or edits a rule that expires. The wait is measured on the
// injected clock (Options.Clock), at least minExpiryWait.
func (r *SnapshotReconciler) untilExpiry() time.Duration {
	if r.nextExpiry.IsZero() {
		return 0
	}
	return max(r.nextExpiry.Sub(r.opts.now()), minExpiryWait)
}

// minExpiryWait keeps a clock that runs a little behind the expiry from
// asking for passes in a tight loop.
const minExpiryWait = 10 * time.Millisecond

// tenantPolicy reads the namespace policy from the Namespaces' annotations.
func (r *SnapshotReconciler) tenantPolicy(ctx context.Context) (*tenantPolicy, error) {
	if r.opts.NamespacePolicy == PolicyOpen {
		return &tenantPolicy{open: true}, nil
	}
	var nss metav1.PartialObjectMetadataList
	nss.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("listing namespaces for the namespace policy: %w", err)
	}
	p := &tenantPolicy{grants: make(map[string]nsGrant, len(nss.Items))}
	for i := range nss.Items {
		p.grants[nss.Items[i].Name] = grantOf(nss.Items[i].Annotations)
	}
	return p, nil
}

// sync compiles items, publishes the snapshot and updates the rule states.
// A failed publish is reported too: rules whose current spec is not in the
// snapshot get Programmed=False with reason PublishFailed, so a wedged
// snapshot never hides behind Ready.
func (r *SnapshotReconciler) sync(ctx context.Context, items []v1alpha1.RateLimitRule, policy *tenantPolicy, targets *targetObjects) error {
	start := time.Now()
	c := compile(items, policy, targets, r.opts.now())
	r.nextExpiry = c.NextExpiry
	pub, err := r.publish(ctx, c.Rules)
	if err != nil {
		publishFailures.Inc()
		publishFailing.Set(1)
		r.updateState(c, published{}, err)
		return err
	}
	publishFailing.Set(0)
	r.updateState(c, pub, nil)
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

// shardInfo is what one existing shard ConfigMap holds, as far as it could be
// verified.
type shardInfo struct {
	meta *metav1.PartialObjectMetadata
	// valid: the ConfigMap decodes and agrees with its annotations (or this
	// process wrote this very resourceVersion). Only then do its version and
	// checksum count; any other shard is rewritten.
	valid    bool
	version  int64
	count    int
	checksum string
	// otherFormat: a good shard in another format than the one written. It
	// is rewritten, but its version counts: the rewrite must get a higher
	// one, or gateways would see the same version with other content.
	otherFormat bool
}

// owns reports whether obj is a shard ConfigMap of this snapshot that the
// controller manages (snapshot.Owned: named <snapshot>-<i>-of-<n> and
// labelled app.kubernetes.io/managed-by=tollgate-controller). The controller
// updates and deletes only those; others carrying the snapshot label are
// reported and left alone. Gateways load only those, by the same function.
func (r *SnapshotReconciler) owns(obj client.Object) bool {
	return snapshot.Owned(r.opts.SnapshotName, obj)
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
	existing := make(map[string]*shardInfo, len(metas.Items))
	var foreign []*metav1.PartialObjectMetadata
	current := 0
	var currentVersion int64 = -1
	for i := range metas.Items {
		m := &metas.Items[i]
		if !r.owns(m) {
			foreign = append(foreign, m)
			continue
		}
		info := r.verify(ctx, m)
		existing[m.Name] = info
		if info.otherFormat {
			r.maxVersion = max(r.maxVersion, info.version)
		}
		if info.valid {
			r.maxVersion = max(r.maxVersion, info.version)
			if info.version > currentVersion {
				current, currentVersion = info.count, info.version
			}
		}
	}
	r.reportForeign(ctx, foreign)

	count := snapshot.ShardCount(len(rules), current)
	for {
		pub, writes, err := r.plan(rules, count, existing)
		if errors.Is(err, snapshot.ErrTooLarge) {
			if count >= snapshot.MaxShards {
				if r.opts.snapshotFormat() == snapshot.FormatTenant {
					return published{}, fmt.Errorf("%d rules do not fit in %d shards: snapshot format %d keeps each tenant's rules in one shard, "+
						"and a tenant has too many; once every gateway reads format %d (0.2.0 and later), run the controller with --snapshot-format=%d",
						len(rules), count, snapshot.FormatTenant, snapshot.Format, snapshot.Format)
				}
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

// verify tells what the shard ConfigMap described by m holds. A shard this
// process wrote is recognised by its resourceVersion; any other (after a
// restart, or edited by hand) is read and decoded as a gateway would, so a
// version annotation raised by hand, or a corrupted payload, is not believed
// and the shard is rewritten.
func (r *SnapshotReconciler) verify(ctx context.Context, m *metav1.PartialObjectMetadata) *shardInfo {
	info := &shardInfo{meta: m}
	r.writtenMu.Lock()
	w, ok := r.written[m.Name]
	r.writtenMu.Unlock()
	if ok && w.resourceVersion == m.ResourceVersion {
		v, vok := annotationInt(m, snapshot.AnnotationVersion)
		n, nok := annotationInt(m, snapshot.AnnotationCount)
		info.valid, info.version, info.count, info.checksum = vok && nok, v, int(n), w.checksum
		return info
	}
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(m), &cm); err != nil {
		return info
	}
	m.ResourceVersion = cm.ResourceVersion // what was verified is what gets updated
	got, err := snapshot.FromConfigMap(&cm)
	if err != nil {
		log.FromContext(ctx).Info("shard ConfigMap is invalid and will be rewritten", "configMap", cm.Name, "error", err.Error())
		return info
	}
	if got.Format != r.opts.snapshotFormat() {
		// Written in another format (by an older controller, or before
		// --snapshot-format changed): rewritten in the configured one.
		info.otherFormat, info.version = true, got.Version
		return info
	}
	r.remember(cm.Name, cm.ResourceVersion, got.Checksum)
	info.valid, info.version, info.count, info.checksum = true, got.Version, got.Count, got.Checksum
	return info
}

// reportForeign reports ConfigMaps that carry the snapshot label but are not
// the controller's: a metric, and a log line and a Warning event the first
// time each is seen.
func (r *SnapshotReconciler) reportForeign(ctx context.Context, foreign []*metav1.PartialObjectMetadata) {
	foreignConfigMaps.Set(float64(len(foreign)))
	seen := make(map[types.UID]bool, len(foreign))
	for _, m := range foreign {
		seen[m.UID] = true
		if r.foreign[m.UID] {
			continue
		}
		msg := fmt.Sprintf("ConfigMap carries the label %s=%s but is not a shard managed by %s (name %s-<i>-of-<n> and label %s=%s); the controller neither updates nor deletes it",
			snapshot.LabelSnapshot, r.opts.SnapshotName, snapshot.ManagedByValue, r.opts.SnapshotName, snapshot.LabelManagedBy, snapshot.ManagedByValue)
		log.FromContext(ctx).Info("ignoring a foreign ConfigMap", "configMap", m.Name, "reason", msg)
		r.recorder.Eventf(&corev1.ConfigMap{ObjectMeta: m.ObjectMeta}, nil, corev1.EventTypeWarning, "ForeignConfigMap", "Publish", "%s", msg)
	}
	r.foreign = seen
}

// plan decides which shards to write for rules in count shards.
func (r *SnapshotReconciler) plan(rules []snapshot.Rule, count int, existing map[string]*shardInfo) (published, []*corev1.ConfigMap, error) {
	format := r.opts.snapshotFormat()
	parts := snapshot.PartitionFormat(rules, count, format)
	pub := published{count: count, versions: make([]int64, count)}
	next := r.maxVersion + 1
	var writes []*corev1.ConfigMap
	for i, part := range parts {
		sh := snapshot.NewShardFormat(format, i, count, 0, part)
		name := snapshot.ConfigMapName(r.opts.SnapshotName, i, count)
		if e, ok := existing[name]; ok && e.valid && e.checksum == sh.Checksum {
			pub.versions[i] = e.version
			continue
		}
		if r.maxVersion >= snapshot.MaxVersion {
			return published{}, nil, fmt.Errorf("%w: the highest shard version is already %d; delete the snapshot ConfigMaps %s/%s-* (the controller rewrites them) and restart the gateways",
				snapshot.ErrVersionExhausted, r.maxVersion, r.opts.SnapshotNamespace, r.opts.SnapshotName)
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

func (r *SnapshotReconciler) remember(name, resourceVersion, checksum string) {
	r.writtenMu.Lock()
	r.written[name] = writtenShard{resourceVersion: resourceVersion, checksum: checksum}
	r.writtenMu.Unlock()
}

// apply performs the writes, then deletes every shard of ours not in the
// layout of count shards.
func (r *SnapshotReconciler) apply(ctx context.Context, writes []*corev1.ConfigMap, existing map[string]*shardInfo, count int) error {
	for _, cm := range writes {
		op := "create"
		if old, ok := existing[cm.Name]; ok {
			op = "update"
			cm.ResourceVersion = old.meta.ResourceVersion
			if err := r.client.Update(ctx, cm); err != nil {
				return fmt.Errorf("updating ConfigMap %s: %w", cm.Name, err)
			}
		} else if err := r.client.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			op = "adopt"
			if err := r.adopt(ctx, cm); err != nil {
				return err
			}
		} else if err != nil {
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
	for name, e := range existing {
		if keep[name] {
			continue
		}
		m := e.meta
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

// adopt overwrites cm's namesake, which exists but was not listed: it lost
// the snapshot label (removed by hand). It is overwritten only if it is
// still ours by name and managed-by label; the write puts the label back.
// Anything else of that name is left alone and publishing fails with a
// message that says what to remove.
func (r *SnapshotReconciler) adopt(ctx context.Context, cm *corev1.ConfigMap) error {
	var cur corev1.ConfigMap
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(cm), &cur); err != nil {
		return fmt.Errorf("creating ConfigMap %s: it exists, but reading it failed: %w", cm.Name, err)
	}
	if !r.owns(&cur) {
		return fmt.Errorf("ConfigMap %s/%s is in the way of shard %s: it exists without the label %s=%s, so the controller does not overwrite it; delete or rename it",
			cm.Namespace, cm.Name, cm.Name, snapshot.LabelManagedBy, snapshot.ManagedByValue)
	}
	cm.ResourceVersion = cur.ResourceVersion
	if err := r.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("updating ConfigMap %s (which had lost its snapshot label): %w", cm.Name, err)
	}
	log.FromContext(ctx).Info("rewrote a shard ConfigMap that had lost its snapshot label", "configMap", cm.Name)
	return nil
}

// updateState records what each rule's status should say and hands the
// rules whose state changed to the status reconciler. With a publish error,
// accepted rules whose current generation was published before keep their
// version (gateways still enforce it); the others are marked PublishFailed.
func (r *SnapshotReconciler) updateState(c compiled, pub published, pubErr error) {
	prev := r.state.snapshot()
	next := make(map[types.UID]ruleState, len(c.Verdicts))
	var accepted, conflicts, invalid, notAllowed, expired float64
	var changed []types.NamespacedName
	for uid, v := range c.Verdicts {
		st := ruleState{verdict: v}
		p, seen := prev[uid]
		switch {
		case v.Accepted:
			accepted++
			switch {
			case seen && p.Accepted && p.Generation == v.Generation && p.PublishedVersion > 0:
				st.PublishedVersion = p.PublishedVersion
			case pubErr != nil:
				st.PublishError = pubErr.Error()
			default:
				st.PublishedVersion = pub.versions[snapshot.Placement(r.opts.snapshotFormat(), v.tenant, v.route, pub.count)]
			}
		case v.Reason == v1alpha1.ReasonConflict || v.Reason == v1alpha1.ReasonTenantNotAllowed:
			if v.Reason == v1alpha1.ReasonConflict {
				conflicts++
			} else {
				notAllowed++
			}
			if !seen || p.Reason != v.Reason || p.Message != v.Message {
				r.recorder.Eventf(c.Objects[uid], nil, corev1.EventTypeWarning, v.Reason, "Compile", "%s", v.Message)
			}
		case v.Reason == v1alpha1.ReasonExpired || v.Reason == v1alpha1.ReasonExpiryInPast:
			expired++
			r.expiryEvent(c.Objects[uid], p, seen, v)
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
	rulesByState.WithLabelValues("not_allowed").Set(notAllowed)
	rulesByState.WithLabelValues("expired").Set(expired)
}

// expiryEvent records the end of a temporary rule once: a Normal event
// when it expires, a Warning when it was refused for an expiry already
// past at its creation.
func (r *SnapshotReconciler) expiryEvent(obj *v1alpha1.RateLimitRule, prev ruleState, seen bool, v verdict) {
	if seen && prev.Reason == v.Reason && prev.Message == v.Message {
		return
	}
	kind := corev1.EventTypeNormal
	if v.Reason == v1alpha1.ReasonExpiryInPast {
		kind = corev1.EventTypeWarning
	}
	r.recorder.Eventf(obj, nil, kind, v.Reason, "Compile", "%s", v.Message)
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
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitrule-snapshot").
		// A failed pass is retried with backoff up to 30s (not the default
		// 16 minutes): what blocked it may be fixed by hand, out of sight
		// of the watches (a foreign ConfigMap in the way is deleted).
		WithOptions(controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second)}).
		WatchesRawSource(initial).
		// Status writes do not change generation; only spec changes, creates
		// and deletes can change the snapshot, and the region shares in
		// force, which the region rebalancer writes in status.
		Watches(&v1alpha1.RateLimitRule{}, toKey, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, regionSharesChanged))).
		// Shards are watched by metadata only, so the cache does not hold
		// every rule twice.
		WatchesMetadata(&corev1.ConfigMap{}, toKey, builder.WithPredicates(shardEvents))
	if r.opts.GatewayAPI {
		// targetRefs resolve to the rules of HTTPRoutes, GRPCRoutes and
		// Gateways.
		b = b.Watches(&gwv1.HTTPRoute{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Watches(&gwv1.GRPCRoute{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Watches(&gwv1.Gateway{}, toKey, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	if r.opts.NamespacePolicy != PolicyOpen {
		// The namespace policy lives in the Namespaces' annotations.
		b = b.WatchesMetadata(&corev1.Namespace{}, toKey, builder.WithPredicates(policyEvents))
	}
	return b.Complete(r)
}

// regionSharesChanged passes the updates of a rule whose region shares in
// force (status.regions, the rebalancer's) changed: they are in the
// snapshot.
var regionSharesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		a, okA := e.ObjectOld.(*v1alpha1.RateLimitRule)
		b, okB := e.ObjectNew.(*v1alpha1.RateLimitRule)
		return okA && okB && !sameShares(a.Status.Regions, b.Status.Regions)
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// sameShares reports whether two lists of shares in force agree on every
// region's percent (demand and lastHeard aside).
func sameShares(a, b []v1alpha1.RegionInForce) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Percent != b[i].Percent {
			return false
		}
	}
	return true
}

// policyEvents passes the Namespace events that can change the policy.
var policyEvents = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return hasPolicy(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		a, b := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
		return a[v1alpha1.AnnotationTenants] != b[v1alpha1.AnnotationTenants] ||
			a[v1alpha1.AnnotationAllowWildcardTenant] != b[v1alpha1.AnnotationAllowWildcardTenant]
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false }, // its rules go with it
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func hasPolicy(obj client.Object) bool {
	a := obj.GetAnnotations()
	return a[v1alpha1.AnnotationTenants] != "" || a[v1alpha1.AnnotationAllowWildcardTenant] != ""
}

func (r *SnapshotReconciler) isShard(obj client.Object) bool {
	return obj.GetNamespace() == r.opts.SnapshotNamespace && obj.GetLabels()[snapshot.LabelSnapshot] == r.opts.SnapshotName
}
