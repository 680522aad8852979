package jwtauth

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
	"github.com/tollgate-dev/tollgate/internal/lib/kubewatch"
)

// SourceOptions are the callbacks of a key source; all may be nil. They
// run on the source's goroutine (or, for URLSource.Refresh, a request's).
type SourceOptions struct {
	// OnLoad hears a new key set once it is in force.
	OnLoad func(*Keys)
	// OnError hears a source that could not be read or held no valid key
	// set; the last good keys stay in force. The error never holds key
	// material.
	OnError func(error)
}

func (o SourceOptions) loaded(k *Keys) {
	if o.OnLoad != nil {
		o.OnLoad(k)
	}
}

func (o SourceOptions) failed(err error) {
	if o.OnError != nil {
		o.OnError(err)
	}
}

// FileSource serves a JWKS file and follows its changes (polled, see
// filewatch: Secret volumes swap symlinks).
type FileSource struct {
	w *filewatch.Watcher[Keys]
}

// NewFileSource loads the JWKS file at path; it fails when the file cannot
// be read or holds no valid key set. Run follows changes every interval.
func NewFileSource(path string, interval time.Duration, opts SourceOptions) (*FileSource, error) {
	w, err := filewatch.New(path, MaxJWKSBytes, ParseJWKS, filewatch.Options[Keys]{
		Interval: interval, OnReload: opts.OnLoad, OnError: opts.OnError,
	})
	if err != nil {
		return nil, err
	}
	return &FileSource{w: w}, nil
}

// Keys is the file's last valid key set.
func (s *FileSource) Keys() *Keys { return s.w.Current() }

// Refresh returns Keys: the file's changes arrive by polling.
func (s *FileSource) Refresh(context.Context) *Keys { return s.w.Current() }

// Run polls the file until ctx ends, and returns nil then.
func (s *FileSource) Run(ctx context.Context) error { return s.w.Run(ctx) }

// Loaded is true: the source is made from a file that loads.
func (s *FileSource) Loaded() bool { return true }

// Poll reads the file once.
func (s *FileSource) Poll() { s.w.Poll() }

// SecretSource serves a JWKS held in one key of a Kubernetes Secret and
// follows its changes through a watch of that one Secret (so a Role
// limited to it by resourceNames suffices). A Secret that goes away, or
// whose key stops holding a valid JWKS, leaves the last good keys in
// force.
type SecretSource struct {
	client          kubernetes.Interface
	namespace, name string
	key             string
	opts            SourceOptions
	cur             atomic.Pointer[Keys]
}

// NewSecretSource returns a source for the JWKS in data key of the Secret
// namespace/name. It has no keys until Run has read the Secret.
func NewSecretSource(client kubernetes.Interface, namespace, name, key string, opts SourceOptions) *SecretSource {
	return &SecretSource{client: client, namespace: namespace, name: name, key: key, opts: opts}
}

// Keys is the last valid key set read from the Secret, nil before one.
func (s *SecretSource) Keys() *Keys { return s.cur.Load() }

// Refresh returns Keys: the Secret's changes arrive through the watch.
func (s *SecretSource) Refresh(context.Context) *Keys { return s.cur.Load() }

// Loaded is true: the gateway serves before the Secret is read (a token
// then is refused as signed by an unknown key).
func (s *SecretSource) Loaded() bool { return true }

// Run watches the Secret until ctx ends.
func (s *SecretSource) Run(ctx context.Context) error {
	factory := kubewatch.OneObject(s.client, s.namespace, s.name)
	inf := factory.Core().V1().Secrets().Informer()
	what := fmt.Sprintf("JWKS Secret %s/%s", s.namespace, s.name)
	return kubewatch.Run(ctx, factory, inf, what, s.opts.OnError, kubewatch.Handlers{
		Load: func(o metav1.Object) { s.load(o) },
		Deleted: func() {
			s.opts.failed(fmt.Errorf("%s was deleted; its last keys stay in force", what))
		},
		Missing: func() {
			s.opts.failed(fmt.Errorf("%s not found; tokens are refused until it holds a JWKS", what))
		},
	})
}

// load parses the Secret's JWKS and swaps it in when it changed.
func (s *SecretSource) load(obj any) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	data, ok := sec.Data[s.key]
	if !ok {
		s.opts.failed(fmt.Errorf("Secret %s/%s has no key %q; the last keys stay in force", s.namespace, s.name, s.key))
		return
	}
	k, err := ParseJWKS(data)
	if err != nil {
		s.opts.failed(fmt.Errorf("Secret %s/%s key %q: %w; the last keys stay in force", s.namespace, s.name, s.key, err))
		return
	}
	if cur := s.cur.Load(); cur != nil && cur.sum == k.sum {
		return
	}
	s.cur.Store(k)
	s.opts.loaded(k)
}
