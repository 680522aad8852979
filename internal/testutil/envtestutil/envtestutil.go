// Package envtestutil locates the envtest binaries (a real kube-apiserver and
// etcd) and a matching kubectl for tests, building them on first use. It
// forwards to internal/procs/kubeapi, which the benchmark harness uses too.
package envtestutil

import (
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

// WriteKubeconfig writes a kubeconfig for an admin user of env into dir and
// returns its path, for running kubectl or tollgate processes against it.
func WriteKubeconfig(env *envtest.Environment, dir string) (string, error) {
	return kubeapi.WriteKubeconfig(env, dir)
}
