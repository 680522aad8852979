package controllers

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// The format written decides which gateways can read the snapshot: format 2
// is refused by gateways that predate it, so the controller writes format 1
// until told otherwise (docs/upgrading.md).
var _ = Describe("Snapshot format", func() {
	ctx := context.Background()

	rules := func(n int) []v1alpha1.RateLimitRule {
		base := metav1.Now()
		var items []v1alpha1.RateLimitRule
		for i := range n {
			name := fmt.Sprintf("r-%05d", i)
			items = append(items, v1alpha1.RateLimitRule{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fmt", UID: types.UID("uid-" + name), Generation: 1,
					CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second))},
				Spec: v1alpha1.RateLimitRuleSpec{Tenant: fmt.Sprintf("shop-%d", i%7), Route: fmt.Sprintf("route-%d", i),
					Capacity: int64(10 + i), RefillPerSecond: ptr.To[int64](1)},
			})
		}
		return items
	}
	reconciler := func(name string, format int) *SnapshotReconciler {
		return &SnapshotReconciler{
			client: k8s, apiReader: k8s, recorder: &events.FakeRecorder{},
			opts:  Options{SnapshotNamespace: snapshotNS, SnapshotName: name, StatusWorkers: 1, SnapshotFormat: format},
			state: newPublishedState(), statusQ: newStatusQueue(), written: map[string]writtenShard{},
		}
	}
	// read returns the published shards' formats and the assembled snapshot.
	read := func(name string) (map[int]int, *snapshot.Set) {
		var list corev1.ConfigMapList
		Expect(k8s.List(ctx, &list, client.InNamespace(snapshotNS), client.MatchingLabels{snapshot.LabelSnapshot: name})).To(Succeed())
		formats := map[int]int{}
		var shards []*snapshot.Shard
		for i := range list.Items {
			sh, err := snapshot.FromConfigMap(&list.Items[i])
			Expect(err).NotTo(HaveOccurred())
			formats[sh.Format]++
			shards = append(shards, sh)
		}
		set, err := snapshot.Select(shards)
		Expect(err).NotTo(HaveOccurred())
		return formats, set
	}
	// 9,000 rules: more than one shard, so placement matters.
	items := rules(9000)
	check := func(set *snapshot.Set) {
		Expect(set.Count()).To(BeNumerically(">", 1))
		Expect(set.Len()).To(Equal(len(items)))
		for _, i := range []int{0, 1, 4321, 8999} {
			r := set.Lookup(fmt.Sprintf("shop-%d", i%7), fmt.Sprintf("route-%d", i))
			Expect(r).NotTo(BeNil())
			Expect(r.Capacity).To(BeEquivalentTo(10 + i))
		}
	}

	It("writes format 1 by default, format 2 when told, and rewrites a snapshot of the other format", func() {
		Expect(snapshot.DefaultWriteFormat).To(Equal(snapshot.FormatTenant))
		r := reconciler("fmt-default", 0)
		Expect(r.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(Succeed())
		formats, set := read("fmt-default")
		Expect(formats).To(HaveLen(1))
		Expect(formats).To(HaveKey(snapshot.FormatTenant))
		Expect(set.Format()).To(Equal(snapshot.FormatTenant))
		check(set)
		// Every accepted rule's status names the version of the shard that
		// holds it in this format.
		for _, i := range []int{0, 4321} {
			st, ok := r.state.get(types.UID(fmt.Sprintf("uid-r-%05d", i)))
			Expect(ok).To(BeTrue())
			idx := snapshot.Placement(snapshot.FormatTenant, fmt.Sprintf("shop-%d", i%7), fmt.Sprintf("route-%d", i), set.Count())
			Expect(st.PublishedVersion).To(Equal(set.Shards()[idx].Version))
		}

		By("told to write format 2 (a controller restarted with --snapshot-format=2)")
		r2 := reconciler("fmt-default", snapshot.Format)
		Expect(r2.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(Succeed())
		formats, set2 := read("fmt-default")
		Expect(formats).To(Equal(map[int]int{snapshot.Format: set2.Count()}))
		Expect(set2.Version()).To(BeNumerically(">", set.Version()), "rewritten shards get new versions")
		check(set2)

		By("and back to format 1 (a rollback of the gateways)")
		r1 := reconciler("fmt-default", snapshot.FormatTenant)
		Expect(r1.sync(ctx, items, &tenantPolicy{open: true}, nil)).To(Succeed())
		formats, set1 := read("fmt-default")
		Expect(formats).To(Equal(map[int]int{snapshot.FormatTenant: set1.Count()}))
		check(set1)
	})

	It("refuses an unknown --snapshot-format", func() {
		o := Options{SnapshotNamespace: "ns", SnapshotName: "s", StatusWorkers: 1, SnapshotFormat: 3}
		Expect(o.Validate()).To(MatchError(ContainSubstring("--snapshot-format must be 1 or 2, not 3")))
		o.SnapshotFormat = 2
		Expect(o.Validate()).To(Succeed())
	})
})
