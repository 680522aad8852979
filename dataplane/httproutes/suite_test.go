package httproutes

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// The suite runs the gateway's watches of the objects the controller writes
// in Gateway API mode, the route table ConfigMap (Source) and the TLS Secret
// (tlscerts.Store.Watch), against a real kube-apiserver and etcd (envtest).
// Every spec has a namespace of its own.

var (
	testEnv *envtest.Environment
	k8s     kubernetes.Interface
	nsSeq   atomic.Int64
)

func TestGatewayAPISourcesAgainstAPIServer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "httproutes: the route table and TLS Secret watches against an API server")
}

var _ = BeforeSuite(func() {
	var err error
	testEnv, err = envtestutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

func newNamespace() string {
	ns := fmt.Sprintf("gwapi-%d", nsSeq.Add(1))
	_, err := k8s.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return ns
}
