package packaging_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/dataplane/routes"
)

// TestChartCRDMatchesConfig: Helm installs charts/tollgate/crds/ as is (never
// templated), so it must be the generated CRD, byte for byte. After `make
// manifests`, copy config/crd/bases/*.yaml into charts/tollgate/crds/.
func TestChartCRDMatchesConfig(t *testing.T) {
	gen, err := filepath.Glob(repoPath("config", "crd", "bases", "*.yaml"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	chart, _ := filepath.Glob(repoPath("charts", "tollgate", "crds", "*.yaml"))
	names := func(paths []string) (n []string) {
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		return n
	}
	if !slices.Equal(names(gen), names(chart)) {
		t.Fatalf("charts/tollgate/crds has %v, config/crd/bases has %v", names(chart), names(gen))
	}
	for _, p := range gen {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(repoPath("charts", "tollgate", "crds", filepath.Base(p)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/tollgate/crds/%s differs from config/crd/bases: run cp config/crd/bases/*.yaml charts/tollgate/crds/", filepath.Base(p))
		}
	}
}

func TestHelmLint(t *testing.T) {
	for _, v := range valueSets {
		t.Run(v.name, func(t *testing.T) {
			args := []string{"lint", "--strict", repoPath("charts", "tollgate"), "--namespace", v.namespace,
				"--kube-version", kubeVersion}
			if v.valuesFile != "" {
				args = append(args, "--values", repoPath("hack", "packaging", "testdata", v.valuesFile))
			}
			out, err := run(root, nil, nil, helm(t), args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestHelmTemplateGolden compares the renders with testdata/<set>.golden;
// -update rewrites them.
func TestHelmTemplateGolden(t *testing.T) {
	for _, v := range valueSets {
		t.Run(v.name, func(t *testing.T) {
			got := mustTemplate(t, v)
			golden := repoPath("hack", "packaging", "testdata", v.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./hack/packaging/ -run Golden -update)", err)
			}
			if got != string(want) {
				t.Errorf("helm template output differs from %s; if intended, rerun with -update.\n%s",
					golden, firstDiff(string(want), got))
			}
		})
	}
}

// firstDiff shows the first differing line with some context.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			from := max(0, i-3)
			ctx := strings.Join(g[from:min(i, len(g))], "\n")
			return "context:\n" + ctx + "\nline " + itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return ""
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestHelmTemplateRejectsBadValues: values.schema.json refuses wrong types,
// unknown keys, bad enums and out-of-range numbers before anything renders.
func TestHelmTemplateRejectsBadValues(t *testing.T) {
	const schemaErr = "values don't meet the specifications of the schema"
	for _, tc := range []struct{ name, values, want string }{
		{"wrong type", "gateway: {replicas: three}", "/gateway/replicas"},
		{"quoted number", `gateway: {replicas: "3"}`, "/gateway/replicas"},
		{"unknown top-level key", "replicaCount: 3", "replicaCount"},
		{"unknown nested key", "gateway: {replica: 2}", "replica"},
		{"unknown key deep down", "redis: {tls: {ca: x}}", "'ca' not allowed"},
		{"bad enum", "redis: {mode: foo}", "/redis/mode"},
		{"bad log level", "controller: {logLevel: verbose}", "/controller/logLevel"},
		{"below minimum", "gateway: {replicas: 0}", "/gateway/replicas"},
		{"bad duration", "redis: {timeout: 5}", "/redis/timeout"},
		{"bad duration string", "redis: {timeout: fast}", "/redis/timeout"},
		{"addrs not a list", "redis: {addrs: 'redis:6379'}", "/redis/addrs"},
		{"route without upstream", "gateway: {routes: [{id: a, path: /a}]}", "/gateway/routes/0"},
		{"route with path and pathPrefix", "gateway: {routes: [{id: a, path: /a, pathPrefix: /b, upstream: 'http://x'}]}", "/gateway/routes/0"},
		{"route with unknown field", "gateway: {routes: [{id: a, path: /a, upstream: 'http://x', retries: 3}]}", "retries"},
		{"extra arg not a flag", "gateway: {extraArgs: [verbose]}", "/gateway/extraArgs/0"},
		{"bad pull policy", "image: {pullPolicy: Sometimes}", "/image/pullPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderWith(t, tc.values)
			if err == nil {
				t.Fatalf("rendered with %s:\n%.300s", tc.values, out)
			}
			if !strings.Contains(err.Error(), schemaErr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want a schema error mentioning %q, got: %v", tc.want, err)
			}
		})
	}
}

// TestHelmTemplateRejectsInconsistentValues: combinations the gateway would
// refuse at start-up fail at render time with a readable message.
func TestHelmTemplateRejectsInconsistentValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"sentinel without master", "redis: {mode: sentinel}", "redis.masterName is required"},
		{"standalone with two addresses", "redis: {addrs: ['a:1', 'b:2']}", "standalone mode takes exactly one address"},
		{"cluster with a db", "redis: {mode: cluster, db: 1}", "redis.db must be 0"},
		{"TLS CA without TLS", "redis: {tls: {caSecret: ca}}", "need redis.tls.enabled"},
		{"HPA min above max", "gateway: {autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 2}}", "minReplicas must not exceed"},
		{"duplicate route id", "gateway: {routes: [{id: a, path: /a, upstream: 'http://x'}, {id: a, path: /b, upstream: 'http://x'}]}", `id "a" is already used`},
		{"stripPrefix without pathPrefix", "gateway: {routes: [{id: a, path: /a, stripPrefix: true, upstream: 'http://x'}]}", "stripPrefix needs pathPrefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderWith(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

// TestControllerDisabled: gateways alone, reading the snapshot of a
// controller installed elsewhere under the same fullname.
func TestControllerDisabled(t *testing.T) {
	out, err := renderWith(t, "controller: {enabled: false}")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	for _, o := range objs {
		if str(o, "metadata", "labels", "app.kubernetes.io/component") == "controller" {
			t.Errorf("%s rendered with controller.enabled=false", o)
		}
	}
	if v, _ := flagValue(containerArgs(t, objs, "tollgate-gateway", "gateway"), "snapshot-name"); v != "tollgate-rules" {
		t.Errorf("gateway --snapshot-name=%q, want tollgate-rules", v)
	}
}

func renderWith(t *testing.T, values string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return helmTemplate(t, valueSets[0], "--values", f)
}

// renders returns every rendering the tests check: both chart value sets and
// the kustomize tree.
func renders(t *testing.T) map[string][]object {
	t.Helper()
	r := map[string][]object{"kustomize": decode(t, kustomizeDefault(t))}
	for _, v := range valueSets {
		r["chart-"+v.name] = decode(t, mustTemplate(t, v))
	}
	return r
}

// TestSecurityContexts: every pod and container of every workload runs as
// the image's nonroot user, read-only, without privilege escalation or
// capabilities, under the runtime's seccomp profile (Pod Security
// "restricted").
func TestSecurityContexts(t *testing.T) {
	for name, objs := range renders(t) {
		specs := podSpecs(objs)
		if len(specs) < 2 {
			t.Errorf("%s: want the controller and gateway workloads, found %v", name, specs)
		}
		for wl, spec := range specs {
			where := name + " " + wl
			psc := get(spec, "securityContext")
			expect(t, where+" pod", psc, "runAsNonRoot", true)
			expect(t, where+" pod", psc, "runAsUser", float64(65532))
			expect(t, where+" pod", get(psc, "seccompProfile"), "type", "RuntimeDefault")
			cs := containers(spec)
			if len(cs) == 0 {
				t.Errorf("%s: no containers", where)
			}
			for _, c := range cs {
				cwhere := where + " container " + str(c, "name")
				sc := get(c, "securityContext")
				expect(t, cwhere, sc, "runAsNonRoot", true)
				expect(t, cwhere, sc, "runAsUser", float64(65532))
				expect(t, cwhere, sc, "readOnlyRootFilesystem", true)
				expect(t, cwhere, sc, "allowPrivilegeEscalation", false)
				expect(t, cwhere, get(sc, "seccompProfile"), "type", "RuntimeDefault")
				if drop := list(sc, "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
					t.Errorf("%s: capabilities.drop = %v, want [ALL]", cwhere, drop)
				}
				if add := list(sc, "capabilities", "add"); len(add) > 0 {
					t.Errorf("%s: capabilities.add = %v, want none", cwhere, add)
				}
			}
		}
	}
}

func expect(t *testing.T, where string, m any, key string, want any) {
	t.Helper()
	if got := get(m, key); got != want {
		t.Errorf("%s: securityContext %s = %v, want %v", where, key, got, want)
	}
}

// containerArgs returns the args of the named container of a Deployment.
func containerArgs(t *testing.T, objs []object, deployment, container string) []string {
	t.Helper()
	d := find(objs, "Deployment", deployment)
	if d == nil {
		t.Fatalf("no Deployment %s", deployment)
	}
	for _, c := range containers(get(d, "spec", "template", "spec").(map[string]any)) {
		if str(c, "name") == container {
			var args []string
			for _, a := range list(c, "args") {
				args = append(args, a.(string))
			}
			return args
		}
	}
	t.Fatalf("Deployment %s has no container %s", deployment, container)
	return nil
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1], true
		}
	}
	return "", false
}

// TestRenderedArgsAcceptedByBinary runs the image's binary with each
// rendered container's args plus --help: cobra parses every flag (names and
// value types: durations, numbers) before printing the help, so a flag the
// binary does not know, or a value it cannot parse, fails here and not in a
// crash-looping pod. It also checks that the two roles agree on the
// snapshot they share.
func TestRenderedArgsAcceptedByBinary(t *testing.T) {
	bin := imageBinary(t)
	type roles struct{ controller, gateway string }
	names := map[string]roles{
		"kustomize":        {"tollgate-controller", "tollgate-gateway"},
		"chart-default":    {"tollgate-controller", "tollgate-gateway"},
		"chart-full":       {"edge-tollgate-controller", "edge-tollgate-gateway"},
		"chart-gatewayapi": {"gw-tollgate-controller", "gw-tollgate-gateway"},
	}
	for name, objs := range renders(t) {
		t.Run(name, func(t *testing.T) {
			n := names[name]
			ctrl := containerArgs(t, objs, n.controller, "controller")
			gw := containerArgs(t, objs, n.gateway, "gateway")
			for _, args := range [][]string{ctrl, gw} {
				if _, err := run(t.TempDir(), nil, nil, bin, append(slices.Clone(args), "--help")...); err != nil {
					t.Errorf("the binary refuses the rendered args: %v", err)
				}
			}
			if ctrl[0] != "controller" || gw[0] != "gateway" {
				t.Errorf("args start with %q and %q, want controller and gateway", ctrl[0], gw[0])
			}
			// Both default to tollgate-rules in POD_NAMESPACE when unset.
			for _, f := range []string{"snapshot-name", "snapshot-namespace"} {
				c, _ := flagValue(ctrl, f)
				g, _ := flagValue(gw, f)
				if c != g {
					t.Errorf("--%s: controller %q, gateway %q", f, c, g)
				}
			}
			if name == "chart-gatewayapi" {
				// Routes come from HTTPRoutes: both run in Gateway API mode
				// and agree on the route table.
				for _, args := range [][]string{ctrl, gw} {
					if !slices.Contains(args, "--gateway-api") {
						t.Errorf("%s has no --gateway-api", args[0])
					}
				}
				c, _ := flagValue(ctrl, "route-table")
				g, _ := flagValue(gw, "route-table")
				if c == "" || c != g {
					t.Errorf("--route-table: controller %q, gateway %q", c, g)
				}
			} else if _, ok := flagValue(gw, "routes"); !ok {
				t.Error("the gateway has no --routes")
			}
		})
	}
}

// TestRoutesConfigMapParses loads each rendered route file with the
// gateway's own parser.
func TestRoutesConfigMapParses(t *testing.T) {
	cms := map[string]string{
		"kustomize":        "tollgate-gateway-routes",
		"chart-default":    "tollgate-routes",
		"chart-full":       "edge-tollgate-routes",
		"chart-gatewayapi": "gw-tollgate-routes",
	}
	for name, objs := range renders(t) {
		cm := find(objs, "ConfigMap", cms[name])
		if cm == nil {
			t.Fatalf("%s: no ConfigMap %s", name, cms[name])
		}
		table, err := routes.Parse([]byte(str(cm, "data", "routes.yaml")))
		if err != nil {
			t.Errorf("%s: the gateway refuses the rendered route file: %v", name, err)
			continue
		}
		want := map[string]int{"kustomize": 2, "chart-default": 0, "chart-full": 2}[name]
		if table.Len() != want {
			t.Errorf("%s: %d routes, want %d", name, table.Len(), want)
		}
		if name == "chart-full" {
			// The request the NOTES suggest matches the first route.
			if r := table.Lookup("POST", "", "/orders").Route; r == nil || r.ID != "create-order" {
				t.Errorf("%s: POST /orders does not match create-order", name)
			}
		}
	}
}

// rbacRules flattens RBAC rules into "group/resource:verb" entries.
func rbacRules(o object) []string {
	var out []string
	for _, r := range list(o, "rules") {
		for _, g := range list(r, "apiGroups") {
			for _, res := range list(r, "resources") {
				for _, v := range list(r, "verbs") {
					out = append(out, g.(string)+"/"+res.(string)+":"+v.(string))
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// gatewayAPIRule reports whether a rule of rbacRules serves only Gateway API
// mode (controllers/gatewayapi_controller.go's markers).
func gatewayAPIRule(r string) bool {
	for _, p := range []string{"gateway.networking.k8s.io/", "discovery.k8s.io/", "apiextensions.k8s.io/", "/services:", "/secrets:"} {
		if strings.HasPrefix(r, p) { // core group rules read "/services:get"
			return true
		}
	}
	return false
}

func readObjects(t *testing.T, parts ...string) []object {
	t.Helper()
	data, err := os.ReadFile(repoPath(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(data))
}

// TestChartRBACMatchesConfig: the chart's roles grant exactly what the
// generated controller roles (config/rbac/role.yaml, from the kubebuilder
// markers) and the gateway role of config/rbac grant.
func TestChartRBACMatchesConfig(t *testing.T) {
	generated := readObjects(t, "config", "rbac", "role.yaml")
	gatewayRole := readObjects(t, "config", "rbac", "gateway_role.yaml")
	for _, v := range valueSets {
		objs := decode(t, mustTemplate(t, v))
		fullname := map[string]string{"default": "tollgate", "full": "edge-tollgate", "gatewayapi": "gw-tollgate"}[v.name]
		gatewayAPI := v.name == "gatewayapi"
		for _, pair := range []struct {
			kind, config, chart string
			from                []object
		}{
			{"ClusterRole", "tollgate-controller", fullname + "-controller", generated},
			{"Role", "tollgate-controller", fullname + "-controller", generated},
			{"Role", "tollgate-gateway", fullname + "-gateway", gatewayRole},
		} {
			want := find(pair.from, pair.kind, pair.config)
			got := find(objs, pair.kind, pair.chart)
			if want == nil || got == nil {
				t.Fatalf("%s: %s %s (config) or %s (chart) missing", v.name, pair.kind, pair.config, pair.chart)
			}
			w, g := rbacRules(want), rbacRules(got)
			if !gatewayAPI {
				// The Gateway API rules are granted only with gatewayAPI.enabled.
				w = slices.DeleteFunc(w, gatewayAPIRule)
			}
			if !slices.Equal(w, g) {
				t.Errorf("%s: %s %s grants %v, config/rbac grants %v", v.name, pair.kind, pair.chart, g, w)
			}
		}
	}
}

// TestDashboardMetrics: the dashboard queries every tollgate metric the
// code defines, and nothing else (a renamed metric breaks this test, not a
// panel).
func TestDashboardMetrics(t *testing.T) {
	defined := map[string]bool{}
	// Every file of the metrics package (a new one must not escape the
	// test: the HTTP/2 metrics did), and the controller's.
	files, err := filepath.Glob(repoPath("dataplane", "metrics", "*.go"))
	if err != nil || len(files) < 4 {
		t.Fatalf("the metrics package's files: %v %v", files, err)
	}
	files = append(files, repoPath("controllers", "metrics.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`Name:\s*"(tollgate_\w+)"`).FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
	}
	if len(defined) < 15 {
		t.Fatalf("found only %d metric definitions: %v", len(defined), defined)
	}
	data, err := os.ReadFile(repoPath("charts", "tollgate", "dashboards", "tollgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboards/tollgate.json: %v", err)
	}
	used := map[string]bool{}
	name := regexp.MustCompile(`tollgate_\w+`)
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && defined[b] {
						base = b
					}
				}
				if !defined[base] {
					t.Errorf("panel %q queries %s, which the code does not define", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for m := range defined {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}

	// The chart ships the file as is, with the sidecar's label.
	objs := decode(t, mustTemplate(t, valueSets[1]))
	cm := find(objs, "ConfigMap", "edge-tollgate-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap with grafana.dashboard.enabled")
	}
	if got := str(cm, "data", "tollgate.json"); strings.TrimSpace(got) != strings.TrimSpace(string(data)) {
		t.Error("the dashboard ConfigMap does not hold dashboards/tollgate.json as is")
	}
	if got := str(cm, "metadata", "labels", "grafana_dashboard"); got != "1" {
		t.Errorf("dashboard ConfigMap label grafana_dashboard = %q, want \"1\"", got)
	}
	if find(decode(t, mustTemplate(t, valueSets[0])), "ConfigMap", "tollgate-dashboard") != nil {
		t.Error("the dashboard ConfigMap is rendered by default")
	}
}

// schemaNode is a JSON schema node, decoded loosely.
type schemaNode map[string]any

func loadSchema(t *testing.T) schemaNode {
	t.Helper()
	data, err := os.ReadFile(repoPath("charts", "tollgate", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestValuesSchemaStrict: every object level of the schema either forbids
// unknown keys (additionalProperties: false), is a map with typed values
// (additionalProperties: {schema}), or is a Kubernetes object passed through
// to the API server, marked with a $comment saying so.
func TestValuesSchemaStrict(t *testing.T) {
	s := loadSchema(t)
	if s["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema = %v, want draft-07", s["$schema"])
	}
	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch v := n.(type) {
		case map[string]any:
			isObject := v["type"] == "object"
			if types, ok := v["type"].([]any); ok {
				isObject = slices.Contains(types, any("object"))
			}
			if isObject {
				_, hasAP := v["additionalProperties"]
				comment, _ := v["$comment"].(string)
				if !hasAP && !strings.Contains(comment, "passed through") {
					t.Errorf("%s: an object without additionalProperties", path)
				}
				if v["additionalProperties"] == true {
					t.Errorf("%s: additionalProperties: true", path)
				}
			}
			for k, c := range v {
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				walk(path+"/"+itoa(i), c)
			}
		}
	}
	walk("#", map[string]any(s))
}

// schemaLeaves lists the dotted paths of the values the schema defines
// inline (nodes without properties of their own), e.g. gateway.replicas.
func schemaLeaves(n schemaNode, prefix string, out map[string]bool) {
	props, _ := n["properties"].(map[string]any)
	for k, c := range props {
		child, _ := c.(map[string]any)
		p := strings.TrimPrefix(prefix+"."+k, ".")
		if _, nested := child["properties"]; nested {
			schemaLeaves(child, p, out)
		} else {
			out[p] = true
		}
	}
}

// TestValuesDocumented: every value of the schema is in values.yaml (so it
// has a default there) with a comment right above it.
func TestValuesDocumented(t *testing.T) {
	leaves := map[string]bool{}
	schemaLeaves(loadSchema(t), "", leaves)
	data, err := os.ReadFile(repoPath("charts", "tollgate", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9_]*):`)
	var stack []string
	documented := map[string]bool{}
	prevComment := false
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			prevComment = true
			continue
		}
		m := key.FindStringSubmatch(line)
		if m == nil {
			prevComment = false
			continue
		}
		depth := len(m[1]) / 2
		if depth > len(stack) {
			prevComment = false
			continue // inside a list item or a default map
		}
		stack = append(stack[:depth], m[2])
		p := strings.Join(stack, ".")
		if leaves[p] {
			documented[p] = prevComment
		}
		prevComment = false
	}
	for p := range leaves {
		doc, ok := documented[p]
		switch {
		case !ok:
			t.Errorf("values.yaml has no %s", p)
		case !doc:
			t.Errorf("values.yaml: %s has no comment above it", p)
		}
	}
}

// TestValuesYAMLIsValidYAML guards the comment-heavy file itself.
func TestValuesYAMLIsValidYAML(t *testing.T) {
	data, err := os.ReadFile(repoPath("charts", "tollgate", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
}

// TestChartRegionRebalancer: controller.regions turns the rebalancer on
// with every region's Redis as the values say (a Cluster over TLS, the CA
// from its Secret mounted where --region-redis-tls-ca-file points, the
// password from its Secret); by default the controller has none of it.
func TestChartRegionRebalancer(t *testing.T) {
	if args := containerArgs(t, decode(t, mustTemplate(t, valueSets[0])), "tollgate-controller", "controller"); slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--region")
	}) {
		t.Errorf("the default controller has region flags: %v", args)
	}
	objs := decode(t, mustTemplate(t, valueSets[1]))
	args := containerArgs(t, objs, "edge-tollgate-controller", "controller")
	for flag, want := range map[string]string{
		"region-redis":                 "eu-west=redis.eu-west.example:6379,us-east=redis.us-east.example:6379",
		"region-redis-mode":            "cluster",
		"region-redis-username":        "rebalancer",
		"region-redis-tls-ca-file":     "/etc/tollgate/region-redis-tls/ca.crt",
		"region-redis-tls-server-name": "redis.regions.example",
		"region-interval":              "30s",
	} {
		if got, ok := flagValue(args, flag); !ok || got != want {
			t.Errorf("--%s = %q (%v), want %q", flag, got, ok, want)
		}
	}
	for _, flag := range []string{"--region-rebalance", "--region-redis-tls"} {
		if !slices.Contains(args, flag) {
			t.Errorf("controller args lack %s: %v", flag, args)
		}
	}
	d := find(objs, "Deployment", "edge-tollgate-controller")
	spec := get(d, "spec", "template", "spec")
	var mounted bool
	for _, v := range list(spec, "volumes") {
		if str(v, "name") == "region-redis-tls-ca" && str(v, "secret", "secretName") == "region-redis-ca" {
			mounted = true
		}
	}
	var at string
	for _, c := range containers(spec.(map[string]any)) {
		for _, m := range list(c, "volumeMounts") {
			if str(m, "name") == "region-redis-tls-ca" {
				at = str(m, "mountPath")
			}
		}
	}
	if !mounted || at != "/etc/tollgate/region-redis-tls" {
		t.Errorf("the regions' CA Secret: volume %v, mounted at %q", mounted, at)
	}
}
