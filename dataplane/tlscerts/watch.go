package tlscerts

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tollgate-dev/tollgate/internal/lib/kubewatch"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// WatchOptions say which Secret Watch loads.
type WatchOptions struct {
	// Client reads the Secret. Required.
	Client kubernetes.Interface
	// Namespace and Table: the Secret is routetable.TLSSecretName(Table)
	// in Namespace, the TLS Secret of the route table ConfigMap Table.
	Namespace, Table string
	// OnForeign is called when the Secret is not the controller's
	// (routetable.Owned: without its labels); it is refused and the
	// certificates in force stay. Without OnForeign, the store's onError
	// hears it.
	OnForeign func(secret *corev1.Secret, err error)
}

// Watch loads the TLS Secret into the store whenever it changes, until ctx
// ends. It watches that one Secret (a field selector on its name, so a Role
// limited to it by resourceNames suffices). A deleted Secret leaves the
// certificates in force (the controller writes it back), and so does one
// that is not the controller's.
func (s *Store) Watch(ctx context.Context, o WatchOptions) error {
	name := routetable.TLSSecretName(o.Table)
	factory := kubewatch.OneObject(o.Client, o.Namespace, name)
	inf := factory.Core().V1().Secrets().Informer()
	return kubewatch.Run(ctx, factory, inf, fmt.Sprintf("TLS Secret %s/%s", o.Namespace, name), s.report, kubewatch.Handlers{
		Load: func(obj metav1.Object) {
			if sec, ok := obj.(*corev1.Secret); ok {
				s.load(sec, o)
			}
		},
	})
}

// load takes the Secret's certificates if the Secret is the controller's.
func (s *Store) load(sec *corev1.Secret, o WatchOptions) {
	if routetable.Owned(o.Table, sec) {
		s.SetSecret(sec.Data)
		return
	}
	err := fmt.Errorf("TLS Secret %s/%s refused, the certificates in force stay: it is not the controller's (gateways load it only with %s)",
		sec.Namespace, sec.Name, routetable.DescribeLabels(o.Table))
	if o.OnForeign != nil {
		o.OnForeign(sec, err)
	} else {
		s.report(err)
	}
}

func (s *Store) report(err error) {
	if s.onError != nil {
		s.onError(err)
	}
}
