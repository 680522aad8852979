package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"

	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
)

// kubeEnv is a real kube-apiserver and etcd (envtest) with tollgate's CRD.
type kubeEnv struct {
	env        *envtest.Environment
	client     client.Client
	kubeconfig string
	assets     string
}

// kubeEnv starts envtest on first use. The binaries are built from the Go
// module proxy the first time on a machine (hack/envtest.sh, slow once).
func (h *harness) kubeEnv(ctx context.Context) (*kubeEnv, error) {
	if h.kube != nil {
		return h.kube, nil
	}
	h.logf("starting kube-apiserver and etcd (envtest; the first run on a machine builds them, which takes long)")
	ctrllog.SetLogger(logr.Discard())
	assets, err := kubeapi.Assets()
	if err != nil {
		return nil, err
	}
	env, err := kubeapi.NewEnvironment()
	if err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	k := &kubeEnv{env: env, assets: assets}
	h.kube = k
	atExit(k.stop)
	cfg.QPS, cfg.Burst = 1000, 2000
	if k.client, err = kubeapi.NewClient(cfg); err != nil {
		return nil, err
	}
	if k.kubeconfig, err = kubeapi.WriteKubeconfig(env, h.logDir); err != nil {
		return nil, err
	}
	return k, ctx.Err()
}

func (k *kubeEnv) stop() {
	if k.env != nil {
		_ = k.env.Stop()
		k.env = nil
	}
}

// namespace creates a namespace.
func (k *kubeEnv) namespace(ctx context.Context, name string) error {
	err := k.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// waitFor polls cond every interval until it is true, fails, or within
// passes.
func waitFor(ctx context.Context, within, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", within, what)
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
}
