package tlscerts

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tollgate-dev/tollgate/internal/lib/kubewatch"
)

// Watch loads the TLS Secret namespace/name into the store whenever it
// changes, until ctx ends. It watches that one Secret (a field selector on
// its name, so a Role limited to it by resourceNames suffices). A deleted
// Secret leaves the certificates in force (the controller writes it back).
func (s *Store) Watch(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	factory := kubewatch.OneObject(client, namespace, name)
	inf := factory.Core().V1().Secrets().Informer()
	report := s.onError
	if err := inf.SetWatchErrorHandlerWithContext(kubewatch.ErrorHandler(fmt.Sprintf("TLS Secret %s/%s", namespace, name), report)); err != nil {
		return err
	}
	upsert := func(obj any) {
		if sec, ok := obj.(*corev1.Secret); ok {
			s.SetSecret(sec.Data)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: upsert,
		UpdateFunc: func(old, obj any) {
			// Periodic resyncs repeat the same version: nothing to load.
			if o, ok := old.(*corev1.Secret); !ok || o.ResourceVersion != obj.(*corev1.Secret).ResourceVersion {
				upsert(obj)
			}
		},
	}); err != nil {
		return err
	}
	factory.StartWithContext(ctx)
	defer factory.Shutdown()
	<-ctx.Done()
	return nil
}
