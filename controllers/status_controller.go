package controllers

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// StatusReconciler writes each RateLimitRule's status from the state of the
// last publish. It is driven only by the snapshot reconciler, which enqueues
// exactly the rules whose state changed, so a publish that changes one rule
// patches one status, not all of them.
type StatusReconciler struct {
	client      client.Client
	state       *publishedState
	snapshotRef string
}

// Reconcile patches the status of one rule when it differs from what the last
// publish decided.
func (r *StatusReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var obj v1alpha1.RateLimitRule
	if err := r.client.Get(ctx, req.NamespacedName, &obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	st, ok := r.state.get(obj.UID)
	if !ok || st.Generation != obj.Generation {
		// The snapshot reconciler has not published this generation yet; it
		// enqueues the rule again once it has.
		return reconcile.Result{}, nil
	}
	want := desiredStatus(&obj, st, r.snapshotRef)
	if statusEqual(&obj.Status, &want) {
		return reconcile.Result{}, nil
	}
	orig := obj.DeepCopy()
	obj.Status = want
	if err := r.client.Status().Patch(ctx, &obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		// A conflict means the object changed since the cache saw it: retry
		// with backoff against the newer version.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	statusPatches.Inc()
	return reconcile.Result{}, nil
}

func (r *StatusReconciler) setupWithManager(mgr ctrl.Manager, queue *statusQueue, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitrule-status").
		WatchesRawSource(source.Func(queue.start)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// statusQueue hands rule names from the snapshot reconciler to the status
// reconciler's work queue without blocking: names added before the
// controller starts are held and flushed when it does.
type statusQueue struct {
	mu      sync.Mutex
	q       workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending map[types.NamespacedName]struct{}
}

func newStatusQueue() *statusQueue {
	return &statusQueue{pending: map[types.NamespacedName]struct{}{}}
}

func (s *statusQueue) start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = q
	for nn := range s.pending {
		q.Add(reconcile.Request{NamespacedName: nn})
	}
	s.pending = nil
	return nil
}

func (s *statusQueue) add(nn types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != nil {
		s.q.Add(reconcile.Request{NamespacedName: nn})
		return
	}
	s.pending[nn] = struct{}{}
}
