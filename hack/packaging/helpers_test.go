package packaging_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// kubeVersion is passed to helm template and lint so renders do not depend
// on the Kubernetes version Helm was built with; it is the envtest version.
const kubeVersion = "1.37.2"

var root = envtestutil.RepoRoot()

// sharedDir holds what several tests reuse (the image binary); TestMain
// removes it.
var sharedDir string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "tollgate-packaging-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func repoPath(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the pinned Helm binary, building it on first use (slow once).
func helm(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		cmd := exec.Command("bash", repoPath("hack", "helm.sh"))
		cmd.Dir = root
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("hack/helm.sh: %v\n%s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		helmPath = lines[len(lines)-1]
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

func kubectl(t testing.TB) string {
	t.Helper()
	k, err := envtestutil.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// run runs a command and returns its stdout; on failure the error carries
// stderr.
func run(dir string, stdin io.Reader, env []string, name string, args ...string) (string, error) {
	out, _, err := runCmd(dir, stdin, env, name, args...)
	return out, err
}

// runCmd runs a command with env added to this process's environment and
// returns stdout and stderr apart (kubectl prints warnings on stderr).
func runCmd(dir string, stdin io.Reader, env []string, name string, args ...string) (string, string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), stderr.String(), fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), stderr.String(), nil
}

// A valueSet is one way of installing the chart that the tests render.
type valueSet struct {
	name       string // golden file testdata/<name>.golden
	release    string
	namespace  string
	valuesFile string // under testdata/; "" for the chart defaults
}

var valueSets = []valueSet{
	// Release "tollgate": the fullname is "tollgate" (names as in config/).
	{name: "default", release: "tollgate", namespace: "tollgate-system"},
	// Release "edge": the fullname is "edge-tollgate".
	{name: "full", release: "edge", namespace: "edge-system", valuesFile: "values-full.yaml"},
	// Gateway API mode (gatewayAPI.enabled), release "gw": "gw-tollgate".
	{name: "gatewayapi", release: "gw", namespace: "gw-system", valuesFile: "values-gatewayapi.yaml"},
}

func (v valueSet) args() []string {
	a := []string{v.release, repoPath("charts", "tollgate"), "--namespace", v.namespace}
	if v.valuesFile != "" {
		a = append(a, "--values", repoPath("hack", "packaging", "testdata", v.valuesFile))
	}
	return a
}

// helmTemplate renders the chart; extra args are appended.
func helmTemplate(t testing.TB, v valueSet, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"template"}, v.args()...)
	args = append(args, "--kube-version", kubeVersion)
	return run(root, nil, nil, helm(t), append(args, extra...)...)
}

func mustTemplate(t testing.TB, v valueSet, extra ...string) string {
	t.Helper()
	out, err := helmTemplate(t, v, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kustomizeDefault renders config/default with the envtest kubectl.
func kustomizeDefault(t testing.TB) string {
	t.Helper()
	out, err := run(root, nil, nil, kubectl(t), "kustomize", repoPath("config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// object is one decoded manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string { return str(o, "metadata", "name") }

func (o object) String() string { return o.kind() + "/" + o.name() }

// decode splits a multi-document YAML stream into objects, skipping empty
// documents (comments only).
func decode(t testing.TB, manifests string) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
}

// get walks nested maps; a missing key gives nil.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			if o, isObj := v.(object); isObj {
				m = o
			} else {
				return nil
			}
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }

func list(v any, path ...string) []any { l, _ := get(v, path...).([]any); return l }

func find(objs []object, kind, name string) object {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

// workloadKinds hold a pod template at spec.template (CronJob: deeper).
var workloadKinds = map[string][]string{
	"Deployment":  {"spec", "template", "spec"},
	"StatefulSet": {"spec", "template", "spec"},
	"DaemonSet":   {"spec", "template", "spec"},
	"Job":         {"spec", "template", "spec"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template", "spec"},
	"Pod":         {"spec"},
}

// podSpecs returns the pod spec of every workload, by object.
func podSpecs(objs []object) map[string]map[string]any {
	specs := map[string]map[string]any{}
	for _, o := range objs {
		if path, ok := workloadKinds[o.kind()]; ok {
			spec, _ := get(o, path...).(map[string]any)
			specs[o.String()] = spec
		}
	}
	return specs
}

// containers lists the init and app containers of a pod spec.
func containers(spec map[string]any) []map[string]any {
	var cs []map[string]any
	for _, key := range []string{"initContainers", "containers", "ephemeralContainers"} {
		for _, c := range list(spec, key) {
			if m, ok := c.(map[string]any); ok {
				cs = append(cs, m)
			}
		}
	}
	return cs
}
