package controllers

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Gateways load the route table ConfigMap and its TLS Secret only with the
// controller's labels, so the controller must not leave an object of those
// names without them, even one whose content equals what it would write.
var _ = Describe("The route table ConfigMap and TLS Secret of its names without its labels", func() {
	ctx := context.Background()

	It("are rewritten with the labels, even with the same content", func() {
		name := fmt.Sprintf("rt-%d", specSeq.Add(1))
		r := &GatewayAPIReconciler{client: k8s, apiReader: k8s, opts: Options{SnapshotNamespace: snapshotNS, RouteTableName: name}}

		table := &routetable.Table{Format: routetable.Format}
		cm, err := table.ConfigMap(snapshotNS, name)
		Expect(err).NotTo(HaveOccurred())
		delete(cm.Labels, snapshot.LabelManagedBy) // a copy put back without it
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Expect(r.publish(ctx, table)).To(Succeed())
		var gotCM corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &gotCM)).To(Succeed())
		Expect(gotCM.Labels).To(HaveKeyWithValue(snapshot.LabelManagedBy, snapshot.ManagedByValue))
		Expect(gotCM.Labels).To(HaveKeyWithValue(routetable.LabelRouteTable, name))
		Expect(gotCM.BinaryData).To(Equal(cm.BinaryData))

		crt, key := certtest.New("shop", "shop.example.com")
		c, k := routetable.CertKeys("shop/cert")
		data := map[string][]byte{c: crt, k: key}
		sec := &corev1.Secret{}
		sec.Namespace, sec.Name = snapshotNS, routetable.TLSSecretName(name)
		sec.Labels = map[string]string{routetable.LabelRouteTable: name}
		sec.Type, sec.Data = corev1.SecretTypeOpaque, data
		Expect(k8s.Create(ctx, sec)).To(Succeed())
		Expect(r.publishTLS(ctx, data)).To(Succeed())
		var gotSec corev1.Secret
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), &gotSec)).To(Succeed())
		Expect(gotSec.Labels).To(HaveKeyWithValue(snapshot.LabelManagedBy, snapshot.ManagedByValue))
		Expect(gotSec.Data).To(Equal(data))

		By("and left alone once they carry them")
		rv, srv := gotCM.ResourceVersion, gotSec.ResourceVersion
		Expect(r.publish(ctx, table)).To(Succeed())
		Expect(r.publishTLS(ctx, data)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &gotCM)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), &gotSec)).To(Succeed())
		Expect(gotCM.ResourceVersion).To(Equal(rv))
		Expect(gotSec.ResourceVersion).To(Equal(srv))
	})
})
