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
	"runtime/debug"
	"strings"
	"sync"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// module is this repository's module path, as its go.mod declares it.
const module = "github.com/tollgate-dev/tollgate"

var (
	rootOnce sync.Once
	root     string
)

// RepoRoot is the repository's top directory: the nearest directory at or
// above the working directory whose go.mod declares this module (tests run
// in their package's directory, `go run ./hack/bench` anywhere in the
// checkout). The test command builds with -trimpath, so that a fresh clone
// elsewhere reuses the build cache, and such a build keeps no source paths
// to go by; an untrimmed build run outside the checkout falls back to this
// file's own path.
func RepoRoot() string {
	rootOnce.Do(func() {
		if wd, err := os.Getwd(); err == nil {
			root = moduleRoot(wd)
		}
		if _, file, _, ok := runtime.Caller(0); root == "" && ok && filepath.IsAbs(file) {
			root = filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
		}
	})
	return root
}

// RaceBuildFlags are the `go build` flags of a race build of tollgate that
// reuses the packages the running test binary was compiled from (a test
// under the race detector that starts tollgate processes): -race, and
// -trimpath when the test binary was built with it, as hack/test.sh builds
// it. A build with other flags compiles every package again.
func RaceBuildFlags() []string {
	flags := []string{"-race"}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-trimpath" && s.Value == "true" {
				flags = append(flags, "-trimpath")
			}
		}
	}
	return flags
}

// moduleRoot is the nearest directory at or above dir whose go.mod declares
// module; "" when there is none (nested modules, such as hack/image's, are
// passed over).
func moduleRoot(dir string) string {
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declares(b, module) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// declares reports whether the go.mod text gomod has a module directive for
// path.
func declares(gomod []byte, path string) bool {
	for line := range strings.Lines(string(gomod)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == path {
			return true
		}
	}
	return false
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

// NewClient is a controller-runtime client of cfg that knows the built-in
// kinds and tollgate's (api/v1alpha1).
func NewClient(cfg *rest.Config) (client.Client, error) {
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}
