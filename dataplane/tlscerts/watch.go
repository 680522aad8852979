package tlscerts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watch loads the TLS Secret namespace/name into the store whenever it
// changes, until ctx ends. It watches that one Secret (a field selector on
// its name, so a Role limited to it by resourceNames suffices). A deleted
// Secret leaves the certificates in force (the controller writes it back).
func (s *Store) Watch(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}),
	)
	inf := factory.Core().V1().Secrets().Informer()
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		if s.onError != nil {
			s.onError(fmt.Errorf("watching TLS Secret %s/%s: %w", namespace, name, err))
		}
	}); err != nil {
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
