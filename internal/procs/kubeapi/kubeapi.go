// Package kubeapi locates the envtest binaries (a real kube-apiserver and
// etcd) and a matching kubectl, building them on first use, and prepares
// envtest environments with tollgate's CRDs: the benchmark harness runs them,
// and internal/testutil/envtestutil wraps it for tests. It is apart from
// package procs so that the tollgate binary (its demo uses procs) does not
// link envtest.
package kubeapi

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the directory holding kube-apiserver, etcd and kubectl. It
// honours KUBEBUILDER_ASSETS when that is set and holds kubectl too, and
// otherwise runs hack/envtest.sh, which downloads or builds them (slow only
// the first time on a machine).
func Assets() (string, error) {
	assetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil {
				assetsDir = dir
				return
			}
		}
		cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "envtest.sh"))
		cmd.Dir = RepoRoot()
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			assetsErr = fmt.Errorf("hack/envtest.sh: %w\n%s", err, stderr.String())
			return
		}
		assetsDir = strings.TrimSpace(out.String())
	})
	return assetsDir, assetsErr
}

// Kubectl returns the path of the kubectl binary that matches the API server.
func Kubectl() (string, error) {
	dir, err := Assets()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kubectl"), nil
}

// NewEnvironment returns an envtest environment with tollgate's CRDs, using
// the binaries from Assets.
func NewEnvironment() (*envtest.Environment, error) {
	dir, err := Assets()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: dir,
	}, nil
}

// WriteKubeconfig writes a kubeconfig for an admin user of env into dir and
// returns its path, for running kubectl or tollgate processes against it.
func WriteKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "tollgate-test-admin", Groups: []string{"system:masters"}}, &rest.Config{})
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}
