package httproutes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tollgate-dev/tollgate/internal/lib/kubewatch"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// SourceOptions configure a Source.
type SourceOptions struct {
	// Namespace and Name of the route table ConfigMap. Required.
	Namespace, Name string
	// OnReload is called after a new table is swapped in.
	OnReload func(*Table)
	// OnError is called when the ConfigMap cannot be decoded (the last good
	// table stays in use) or watching fails.
	OnError func(error)
	// OnForeign is called when the ConfigMap is not the controller's
	// (routetable.Owned: without its labels); it is refused and the last
	// good table stays in use. Without OnForeign, OnError hears it.
	OnForeign func(cm *corev1.ConfigMap, err error)
}

// Source keeps the current table loaded from the route table ConfigMap that
// the controller writes. A ConfigMap that does not decode, or that is not
// the controller's (routetable.Owned), is refused and the last good table
// stays in force; a deleted ConfigMap leaves the last table in force too (the
// controller writes it back).
type Source struct {
	client kubernetes.Interface
	opts   SourceOptions
	cur    atomic.Pointer[Table]
	loaded atomic.Bool

	mu sync.Mutex
	rv string
}

// NewSource returns a source; Run starts it.
func NewSource(client kubernetes.Interface, opts SourceOptions) *Source {
	s := &Source{client: client, opts: opts}
	s.cur.Store(New(nil))
	return s
}

// Current returns the table in force (empty until the first load).
func (s *Source) Current() *Table { return s.cur.Load() }

// Loaded reports whether a table was loaded.
func (s *Source) Loaded() bool { return s.loaded.Load() }

// Run watches the ConfigMap until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	if s.opts.Namespace == "" || s.opts.Name == "" {
		return errors.New("route table source: Namespace and Name are required")
	}
	factory := kubewatch.OneObject(s.client, s.opts.Namespace, s.opts.Name)
	inf := factory.Core().V1().ConfigMaps().Informer()
	what := fmt.Sprintf("route table ConfigMap %s/%s", s.opts.Namespace, s.opts.Name)
	return kubewatch.Run(ctx, factory, inf, what, s.report, kubewatch.Handlers{Load: func(o metav1.Object) { s.upsert(o) }})
}

func (s *Source) upsert(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm.ResourceVersion == s.rv {
		return
	}
	s.rv = cm.ResourceVersion
	what := "no route table is loaded yet"
	if s.loaded.Load() {
		what = "the last good route table stays in use"
	}
	if !routetable.Owned(s.opts.Name, cm) {
		err := fmt.Errorf("route table ConfigMap %s/%s refused, %s: it is not the controller's (gateways load it only with %s)",
			cm.Namespace, cm.Name, what, routetable.DescribeLabels(s.opts.Name))
		if s.opts.OnForeign != nil {
			s.opts.OnForeign(cm, err)
		} else {
			s.report(err)
		}
		return
	}
	t, err := routetable.FromConfigMap(cm)
	if err != nil {
		s.report(fmt.Errorf("route table ConfigMap %s/%s rejected, %s: %w", cm.Namespace, cm.Name, what, err))
		return
	}
	table := New(t)
	s.cur.Store(table)
	s.loaded.Store(true)
	if s.opts.OnReload != nil {
		s.opts.OnReload(table)
	}
}

func (s *Source) report(err error) {
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}
