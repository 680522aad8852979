// Package envtestutil locates the envtest binaries (a real kube-apiserver and
// etcd) and a matching kubectl for tests, building them on first use. It
// forwards to internal/procs/kubeapi, which the benchmark harness uses too.
package envtestutil

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tollgate-dev/tollgate/internal/procs/kubeapi"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string { return kubeapi.RepoRoot() }

// RaceBuildFlags: see kubeapi.RaceBuildFlags.
func RaceBuildFlags() []string { return kubeapi.RaceBuildFlags() }

// Assets returns the directory holding kube-apiserver, etcd and kubectl; see
// kubeapi.Assets.
func Assets() (string, error) { return kubeapi.Assets() }

// Kubectl returns the path of the kubectl binary that matches the API server.
func Kubectl() (string, error) { return kubeapi.Kubectl() }

// NewEnvironment returns an envtest environment with tollgate's CRDs, using
// the binaries from Assets.
func NewEnvironment() (*envtest.Environment, error) { return kubeapi.NewEnvironment() }

// Start starts a NewEnvironment for the test, stopped when it ends, and
// returns it with its REST config; it fails the test when it cannot.
func Start(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env, err := NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env, cfg
}

// Client is a client of cfg that knows the built-in kinds and tollgate's
// (kubeapi.NewClient); it fails the test when it cannot.
func Client(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := kubeapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WriteKubeconfig writes a kubeconfig for an admin user of env into dir and
// returns its path, for running kubectl or tollgate processes against it.
func WriteKubeconfig(env *envtest.Environment, dir string) (string, error) {
	return kubeapi.WriteKubeconfig(env, dir)
}
