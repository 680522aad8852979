package packaging_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
)

// serviceMonitorCRD is a minimal stand-in for the Prometheus Operator's
// ServiceMonitor and PrometheusRule CRDs, which envtest does not have. They
// are installed for real (rather than filtering the chart's objects out of
// the dry run) so that the API server at least checks their apiVersion, kind
// and metadata; their spec is not validated
// (x-kubernetes-preserve-unknown-fields; promtool checks the rules, see
// alerts_test.go).
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names:
    kind: ServiceMonitor
    listKind: ServiceMonitorList
    plural: servicemonitors
    singular: servicemonitor
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names:
    kind: PrometheusRule
    listKind: PrometheusRuleList
    plural: prometheusrules
    singular: prometheusrule
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

// namespaces the renders install into. Pod Security "restricted" is enforced
// and warned about, so a pod template that breaks it shows up as a warning
// of the dry run (the API server checks workload templates too).
var namespaces = []string{"tollgate-system", "edge-system", "gw-system", "team-a", "team-b", "psa-check"}

func namespaceManifests() string {
	var b strings.Builder
	for _, ns := range namespaces {
		b.WriteString("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n  labels:\n" +
			"    pod-security.kubernetes.io/enforce: restricted\n    pod-security.kubernetes.io/warn: restricted\n")
	}
	return b.String()
}

// privilegedDeployment breaks Pod Security "restricted": the dry run must
// warn about it, which shows the warning check below is not vacuous.
const privilegedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: privileged
  namespace: psa-check
spec:
  selector:
    matchLabels: {app: privileged}
  template:
    metadata:
      labels: {app: privileged}
    spec:
      containers:
      - name: c
        image: example
        securityContext:
          privileged: true
`

// TestAPIServer applies every rendering to a real kube-apiserver (envtest,
// with the tollgate CRD): a server-side dry run of the chart (both value
// sets, CRDs included) and of config/default, where every object must be
// accepted without warnings; then real `helm install`s, whose NOTES must hold
// a RateLimitRule that the API server accepts.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	helmBin, kubectlBin := helm(t), kubectl(t)
	env, err := envtestutil.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	// The Gateway API CRDs, which a cluster provides for gatewayAPI.enabled.
	gwDir, err := run(root, nil, nil, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	if err != nil {
		t.Fatal(err)
	}
	env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, filepath.Join(strings.TrimSpace(gwDir), "config", "crd", "standard"))
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Log(err)
		}
	})
	dir := t.TempDir()
	kubeconfig, err := envtestutil.WriteKubeconfig(env, dir)
	if err != nil {
		t.Fatal(err)
	}
	kenv := []string{
		"KUBECONFIG=" + kubeconfig,
		"HOME=" + dir, // kubectl's cache, helm's defaults
		"HELM_CACHE_HOME=" + filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm", "config"),
		"HELM_DATA_HOME=" + filepath.Join(dir, "helm", "data"),
	}
	kc := func(stdin string, args ...string) (string, string, error) {
		return runSplit(root, stdin, kenv, kubectlBin, args...)
	}
	if _, _, err := kc(namespaceManifests()+"---\n"+serviceMonitorCRD, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kc("", "wait", "--for", "condition=established", "--timeout", "60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}

	// dryRun applies manifests with --dry-run=server and checks that each
	// object was accepted, without warnings other than the harmless one for
	// objects created by something other than kubectl apply (the CRD that
	// envtest installed).
	dryRun := func(t *testing.T, manifests string) {
		t.Helper()
		objs := decode(t, manifests)
		out, stderr, err := kc(manifests, "apply", "--dry-run=server", "-o", "name", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Fields(out)
		if len(names) != len(objs) {
			t.Errorf("the API server accepted %d objects, want %d: %v", len(names), len(objs), names)
		}
		for _, w := range warnings(stderr) {
			t.Errorf("warning: %s", w)
		}
	}

	t.Run("warnings are reported", func(t *testing.T) {
		_, stderr, err := kc(privilegedDeployment, "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "PodSecurity") {
			t.Fatalf("no PodSecurity warning for a privileged pod template; stderr: %q", stderr)
		}
	})
	t.Run("dry-run/kustomize", func(t *testing.T) { dryRun(t, kustomizeDefault(t)) })
	for _, v := range valueSets {
		t.Run("dry-run/chart-"+v.name, func(t *testing.T) { dryRun(t, mustTemplate(t, v, "--include-crds")) })
	}

	for _, v := range valueSets {
		t.Run("helm-install/"+v.name, func(t *testing.T) {
			args := append([]string{"install"}, v.args()...)
			out, stderr, err := runSplit(root, "", kenv, helmBin, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warnings(stderr) {
				t.Errorf("helm install warning: %s", w)
			}
			if !strings.Contains(out, "STATUS: deployed") {
				t.Errorf("helm install did not deploy:\n%s", out)
			}
			fullname := map[string]string{"default": "tollgate", "full": "edge-tollgate", "gatewayapi": "gw-tollgate"}[v.name]
			if _, _, err := kc("", "-n", v.namespace, "get", "deployment/"+fullname+"-gateway",
				"deployment/"+fullname+"-controller", "configmap/"+fullname+"-routes"); err != nil {
				t.Error(err)
			}
			checkRBAC(t, kc, v, fullname)
			checkLeasePolicy(t, kc, v, fullname)
			notes := out[strings.Index(out, "NOTES:"):]
			for _, want := range []string{
				"port-forward service/" + fullname + "-gateway 8080:",
				"curl -i ",
				"X-Api-Key: shop-a",
				"kubectl get rlr",
			} {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES lack %q:\n%s", want, notes)
				}
			}
			rule := heredoc(notes)
			if !strings.Contains(rule, "kind: RateLimitRule") {
				t.Fatalf("no RateLimitRule in the NOTES:\n%s", notes)
			}
			if _, stderr, err := kc(rule, "apply", "--dry-run=server", "-f", "-"); err != nil {
				t.Errorf("the NOTES' rule is refused: %v\n%s", err, rule)
			} else if w := warnings(stderr); len(w) > 0 {
				t.Errorf("the NOTES' rule gives warnings %v", w)
			}
		})
	}
}

// checkRBAC asks the API server's authorizer (kubectl auth can-i,
// impersonating each ServiceAccount) whether the installed roles and
// bindings give each role what the code needs, and not more than that
// elsewhere. A binding with a wrong subject or roleRef passes a dry run but
// fails here.
func checkRBAC(t *testing.T, kc func(string, ...string) (string, string, error), v valueSet, fullname string) {
	t.Helper()
	ns := v.namespace
	gateway := "system:serviceaccount:" + ns + ":" + fullname + "-gateway"
	controller := "system:serviceaccount:" + ns + ":" + fullname + "-controller"
	rulesNS := "default"
	if v.name == "full" {
		rulesNS = "team-a"
	}
	// Gateway API mode with HTTPS: the controller reads certificate Secrets
	// anywhere and writes the TLS Secret; gateways read that Secret only.
	gwAPI := v.name == "gatewayapi"
	tlsSecret := "secrets/" + fullname + "-httproutes-tls"
	for _, c := range []struct {
		as, verb, resource, ns, sub string
		want                        bool
	}{
		{gateway, "watch", "configmaps", ns, "", true},
		{gateway, "list", "configmaps", ns, "", true},
		{gateway, "create", "leases.coordination.k8s.io", ns, "", true},
		{gateway, "update", "leases.coordination.k8s.io", ns, "", true},
		{gateway, "delete", "leases.coordination.k8s.io", ns, "", true},
		{gateway, "watch", "leases.coordination.k8s.io", ns, "", true},
		{gateway, "update", "configmaps", ns, "", false},
		{gateway, "list", "secrets", ns, "", false},
		{gateway, "list", "configmaps", "team-b", "", false},
		{controller, "watch", "ratelimitrules.ratelimit.tollgate.dev", rulesNS, "", true},
		{controller, "patch", "ratelimitrules.ratelimit.tollgate.dev", rulesNS, "status", true},
		{controller, "update", "ratelimitrules.ratelimit.tollgate.dev", rulesNS, "", false},
		{controller, "create", "events.events.k8s.io", rulesNS, "", true},
		{controller, "create", "configmaps", ns, "", true},
		{controller, "delete", "configmaps", ns, "", true},
		{controller, "update", "leases.coordination.k8s.io", ns, "", true},
		{controller, "create", "events", ns, "", true},
		{controller, "create", "configmaps", "team-b", "", false},
		{controller, "list", "secrets", ns, "", gwAPI},
		{controller, "get", "secrets", "team-b", "", gwAPI},
		{controller, "create", "secrets", ns, "", gwAPI},
		{controller, "create", "secrets", "team-b", "", false},
		{controller, "update", "secrets", "team-b", "", false},
		{gateway, "get", tlsSecret, ns, "", gwAPI},
		{gateway, "watch", tlsSecret, ns, "", gwAPI},
		{gateway, "get", "secrets/other", ns, "", false},
		{gateway, "get", tlsSecret, "team-b", "", false},
	} {
		args := []string{"auth", "can-i", c.verb, c.resource, "-n", c.ns, "--as", c.as}
		if c.sub != "" {
			args = append(args, "--subresource", c.sub)
		}
		out, _, err := kc("", args...)
		got := strings.TrimSpace(out) == "yes"
		if err != nil && got {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s can %s %s (%s) in %s: %v, want %v", c.as, c.verb, c.resource, c.sub, c.ns, got, c.want)
		}
	}
}

// checkLeasePolicy checks the installed ValidatingAdmissionPolicy: the
// gateway's ServiceAccount may write a Lease of its membership group, but
// not the controller's leader election Lease, which its Role alone would
// allow.
func checkLeasePolicy(t *testing.T, kc func(string, ...string) (string, string, error), v valueSet, fullname string) {
	t.Helper()
	ns, gw := v.namespace, fullname+"-gateway"
	as := "--as=system:serviceaccount:" + ns + ":" + gw
	lease := func(name, label string) string {
		m := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\n"
		if label != "" {
			m += "  labels:\n    ratelimit.tollgate.dev/gateway-group: " + label + "\n"
		}
		return m + "spec:\n  holderIdentity: " + name + "\n  leaseDurationSeconds: 15\n"
	}
	// The controller's Lease, as leader election creates it.
	if _, stderr, err := kc(lease(fullname+"-controller", ""), "create", "-f", "-"); err != nil {
		t.Fatalf("creating the controller's Lease: %v\n%s", err, stderr)
	}
	// The policy takes effect shortly after its creation: wait until an
	// unlabelled Lease of the gateway's is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, stderr, err := kc(lease("probe", ""), "create", "-f", "-", as)
		if err != nil && strings.Contains(stderr, "denied request") {
			break
		}
		if err == nil {
			_, _, _ = kc("", "delete", "lease", "probe", "-n", ns)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease policy never took effect: %v\n%s", err, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// An update (PUT: the gateway's Role has update, not patch) that takes
	// the controller's Lease over.
	hijack := strings.Replace(lease(fullname+"-controller", ""), "holderIdentity: "+fullname+"-controller", "holderIdentity: "+gw+"-pod-1", 1)
	if _, stderr, err := kc(hijack, "replace", "-f", "-", as); err == nil || !strings.Contains(stderr, "denied request") {
		t.Errorf("the gateway could write the controller's Lease: %v\n%s", err, stderr)
	}
	if _, stderr, err := kc("", "delete", "lease", fullname+"-controller", "-n", ns, as); err == nil || !strings.Contains(stderr, "denied request") {
		t.Errorf("the gateway could delete the controller's Lease: %v\n%s", err, stderr)
	}
	if _, stderr, err := kc(lease(gw+"-pod-1", gw), "create", "-f", "-", as); err != nil {
		t.Errorf("the gateway cannot create its membership Lease: %v\n%s", err, stderr)
	}
	if _, stderr, err := kc("", "delete", "lease", gw+"-pod-1", "-n", ns, as); err != nil {
		t.Errorf("the gateway cannot delete its membership Lease: %v\n%s", err, stderr)
	}
}

// heredoc returns the body of the first `cat <<'EOF' | kubectl apply -f -`
// in text, dedented.
func heredoc(text string) string {
	lines := strings.Split(text, "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, "<<'EOF'") && strings.Contains(l, "kubectl apply -f -") {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return ""
	}
	var body []string
	for _, l := range lines[start:] {
		if strings.TrimSpace(l) == "EOF" {
			break
		}
		body = append(body, l)
	}
	indent := -1
	for _, l := range body {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range body {
		if len(l) >= indent && indent > 0 {
			body[i] = l[indent:]
		}
	}
	return strings.Join(body, "\n") + "\n"
}

// warnings returns the "Warning:" lines of kubectl or helm stderr, minus
// the one kubectl prints when it applies to an object that was not created
// with kubectl apply.
func warnings(stderr string) []string {
	var ws []string
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "Warning:") && !strings.Contains(l, "WARNING:") {
			continue
		}
		if strings.Contains(l, "kubectl.kubernetes.io/last-applied-configuration") {
			continue
		}
		ws = append(ws, strings.TrimSpace(l))
	}
	return ws
}

// runSplit is runCmd with stdin as a string.
func runSplit(dir, stdin string, env []string, name string, args ...string) (string, string, error) {
	return runCmd(dir, strings.NewReader(stdin), env, name, args...)
}
