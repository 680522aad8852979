package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// BenchmarkPublish measures the controller's snapshot pass against a real
// API server: compile n rules, write every shard ConfigMap (cold), or write
// the one shard a single rule change touches (one-change), or find nothing to
// write (no-change). The rules are built in memory rather than created
// through the API server, which would take minutes at 100,000 and measure
// the API server, not the controller.
//
//	go test -run '^$' -bench Publish -benchtime 3x ./controllers/
func BenchmarkPublish(b *testing.B) {
	_, cfg := envtestutil.Start(b)
	cfg.QPS, cfg.Burst = 1000, 2000
	c := envtestutil.Client(b, cfg)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: snapshotNS}}); err != nil {
		b.Fatal(err)
	}
	seq := 0
	newReconciler := func() *SnapshotReconciler {
		seq++
		return &SnapshotReconciler{
			client: c, apiReader: c, recorder: &events.FakeRecorder{},
			opts:  Options{SnapshotNamespace: snapshotNS, SnapshotName: fmt.Sprintf("bench-%d", seq), StatusWorkers: 1},
			state: newPublishedState(), statusQ: newStatusQueue(), written: map[string]writtenShard{},
		}
	}
	cleanup := func(r *SnapshotReconciler) {
		_ = c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(snapshotNS),
			client.MatchingLabels{snapshot.LabelSnapshot: r.opts.SnapshotName})
	}

	for _, n := range []int{20_000, 100_000} {
		items := syntheticRules(n)
		b.Run(fmt.Sprintf("rules=%d/cold", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r := newReconciler()
				b.StartTimer()
				if err := r.sync(ctx, items, &tenantPolicy{open: true}, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				reportShards(b, c, r)
				cleanup(r)
				b.StartTimer()
			}
		})
		r := newReconciler()
		if err := r.sync(ctx, items, &tenantPolicy{open: true}, nil); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("rules=%d/one-change", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				items[i%n].Spec.Capacity++
				items[i%n].Generation++
				if err := r.sync(ctx, items, &tenantPolicy{open: true}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rules=%d/no-change", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := r.sync(ctx, items, &tenantPolicy{open: true}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		cleanup(r)
	}
}

func reportShards(b *testing.B, c client.Client, r *SnapshotReconciler) {
	var list corev1.ConfigMapList
	if err := c.List(context.Background(), &list, client.InNamespace(snapshotNS),
		client.MatchingLabels{snapshot.LabelSnapshot: r.opts.SnapshotName}); err != nil {
		b.Fatal(err)
	}
	total, largest := 0, 0
	for _, cm := range list.Items {
		size := len(cm.BinaryData[snapshot.DataKey])
		total += size
		largest = max(largest, size)
	}
	b.ReportMetric(float64(len(list.Items)), "shards")
	b.ReportMetric(float64(total), "snapshot-bytes")
	b.ReportMetric(float64(largest), "largest-shard-bytes")
}

// syntheticRules builds n rules as the cache would hold them: distinct
// tenants, a few routes, distinct creation times.
func syntheticRules(n int) []v1alpha1.RateLimitRule {
	items := make([]v1alpha1.RateLimitRule, n)
	base := metav1.Now()
	for i := range items {
		items[i] = v1alpha1.RateLimitRule{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("rule-%d", i), Namespace: "team-" + fmt.Sprint(i%50),
				UID: types.UID(fmt.Sprintf("uid-%d", i)), Generation: 1,
				CreationTimestamp: metav1.NewTime(base.Add(-1e9 * time.Duration(i))),
			},
			Spec: v1alpha1.RateLimitRuleSpec{
				Tenant: fmt.Sprintf("tenant-%06d", i), Route: []string{"create-order", "list-orders", "*"}[i%3],
				Capacity: int64(i%1000 + 1), RefillPerSecond: ptr.To(int64(i%500 + 1)),
			},
		}
	}
	return items
}
