// Package kubewatch holds what the gateway's watches of Kubernetes objects
// share: a watch of one named object, and the filter that tells a routine
// end of a watch (which the informer recovers from by itself) from a
// failure worth reporting.
package kubewatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// resync is how often informers of this package replay their objects.
const resync = 10 * time.Minute

// OneObject returns an informer factory that lists and watches only the
// object namespace/name (a field selector on its name), so that a Role
// limited to it by resourceNames suffices.
func OneObject(client kubernetes.Interface, namespace, name string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}),
	)
}

// RoutineEnd reports whether err only ends a watch in the usual way (the
// connection closed, the resource version too old): the informer lists
// and watches again without anyone's help.
func RoutineEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// ErrorHandler is an informer's watch error handler that passes report the
// errors that are not RoutineEnd, prefixed with what was watched
// ("watching <what>: ...").
func ErrorHandler(what string, report func(error)) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if RoutineEnd(err) || report == nil {
			return
		}
		report(fmt.Errorf("watching %s: %w", what, err))
	}
}

// Handlers are what a watch of one object (Run) does with it.
type Handlers struct {
	// Load gets the object when it is first seen and at each new version
	// (a periodic resync of the same resourceVersion is left out).
	Load func(obj metav1.Object)
	// Deleted, if set, is called when the object is deleted.
	Deleted func()
	// Missing, if set, is called once when the first list holds no object.
	Missing func()
}

// Run watches the object of inf, an informer of factory (OneObject), until
// ctx ends: its errors go to report as ErrorHandler says, its versions to
// h. It returns nil when ctx ends.
func Run(ctx context.Context, factory informers.SharedInformerFactory, inf cache.SharedIndexInformer, what string, report func(error), h Handlers) error {
	if err := inf.SetWatchErrorHandlerWithContext(ErrorHandler(what, report)); err != nil {
		return err
	}
	load := func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			h.Load(o)
		}
	}
	fs := cache.ResourceEventHandlerFuncs{
		AddFunc: load,
		UpdateFunc: func(old, obj any) {
			o, okOld := old.(metav1.Object)
			n, okNew := obj.(metav1.Object)
			if !okOld || !okNew || o.GetResourceVersion() != n.GetResourceVersion() {
				load(obj)
			}
		},
	}
	if h.Deleted != nil {
		fs.DeleteFunc = func(any) { h.Deleted() }
	}
	if _, err := inf.AddEventHandler(fs); err != nil {
		return err
	}
	factory.StartWithContext(ctx)
	defer factory.Shutdown()
	if h.Missing != nil && cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && len(inf.GetStore().List()) == 0 {
		h.Missing()
	}
	<-ctx.Done()
	return nil
}
