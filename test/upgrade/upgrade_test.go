// Package upgrade runs a rolling upgrade the way it happens in a cluster: a
// controller and gateways of two versions side by side against one real
// kube-apiserver + etcd (envtest) and one redis-server, and checks that every
// gateway keeps enforcing the rules throughout.
//
// The earlier version is built in the test from a pinned revision of this
// repository (git archive of previousRevision, go build with the shared build
// cache): the last commit before snapshot format 2, whose gateways read format
// 1 only. Without git history (a shallow clone, a source tarball) the test
// skips and says so; CI runs in a full clone.
package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/gobuild"
	"github.com/tollgate-dev/tollgate/internal/testutil/proctest"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// previousRevision is the earlier version, 0.1: the parent of 6db5501,
// which introduced snapshot format 2. Its gateways refuse format 2 shards.
const previousRevision = "4981ae8a5f58c4df2f5a3f5b5e30056df3b762b2"

const namespace = "tollgate-system"

var root = envtestutil.RepoRoot()

func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two tollgate binaries and runs an API server")
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", previousRevision+"^{commit}").Run(); err != nil {
		t.Skipf("git history with commit %s is not available here (shallow clone or no git: %v); "+
			"this test builds that earlier version and needs a full clone", previousRevision[:12], err)
	}
	dir := t.TempDir()

	// Both binaries, built side by side.
	var wg sync.WaitGroup
	var oldBin, newBin string
	var oldErr, newErr error
	wg.Go(func() { oldBin, oldErr = buildRevision(t, dir) })
	wg.Go(func() { newBin, newErr = buildTree(dir) })
	wg.Wait()
	if oldErr != nil || newErr != nil {
		t.Fatalf("building: previous: %v; current: %v", oldErr, newErr)
	}

	ctrllog.SetLogger(logr.Discard())
	env, cfg := envtestutil.Start(t)
	kubeconfig, err := envtestutil.WriteKubeconfig(env, dir)
	if err != nil {
		t.Fatal(err)
	}
	k8s := envtestutil.Client(t, cfg)
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	// The current controller's namespace policy: let "default" limit any tenant.
	var def corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: "default"}, &def); err != nil {
		t.Fatal(err)
	}
	def.Annotations = map[string]string{v1alpha1.AnnotationTenants: "*"}
	if err := k8s.Update(ctx, &def); err != nil {
		t.Fatal(err)
	}

	redis := redistest.Start(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	t.Cleanup(upstream.Close)
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - id: orders\n    path: /orders\n    upstream: "+upstream.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	h := &harness{t: t, dir: dir, kubeconfig: kubeconfig, redis: redis.Addr(), routes: routes, k8s: k8s}
	rule := func(name string, capacity int64) {
		t.Helper()
		r := &v1alpha1.RateLimitRule{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1alpha1.RateLimitRuleSpec{Tenant: name, Route: "orders", Capacity: capacity,
				// One token an hour: a check never sees a refill.
				Refill: &v1alpha1.Refill{Tokens: 1, Period: metav1.Duration{Duration: time.Hour}}},
		}
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	// 1. The controller is upgraded first: the current controller, one
	// gateway of each version.
	ctrl := h.startController("controller-current", newBin, h.controllerArgs())
	oldGW := h.startGateway("gateway-previous", oldBin)
	newGW := h.startGateway("gateway-current", newBin)
	rule("t-one", 4)
	rule("t-four", 2) // used in step 2
	h.waitRules(oldGW, 2)
	h.waitRules(newGW, 2)
	// Both enforce the rule, on the same bucket in Redis: 4 of 8 requests
	// pass, whichever gateway serves them.
	h.expectAllowed("t-one", 4, 8, oldGW, newGW)
	if f := newGW.metric("tollgate_gateway_snapshot_format"); f != 1 {
		t.Errorf("the current gateway loaded format %v, want 1 (the controller's default)", f)
	}
	if f := ctrl.metric("tollgate_controller_snapshot_format"); f != 1 {
		t.Errorf("tollgate_controller_snapshot_format = %v, want 1", f)
	}
	h.loggedVersion(newGW, newBin, "starting gateway")
	h.loggedVersion(ctrl, newBin, "starting controller")
	// A rule added now reaches the earlier gateway too.
	rule("t-two", 2)
	h.waitRules(oldGW, 3)
	h.waitRules(newGW, 3)
	h.expectAllowed("t-two", 2, 6, oldGW, newGW)

	// 2. Told to write format 2 before every gateway reads it: the earlier
	// gateway refuses the new shards, says so, and keeps enforcing its last
	// good snapshot; the current one loads it.
	h.stop(ctrl)
	refusedBefore := oldGW.metric(`tollgate_gateway_reload_errors_total{source="rules"}`)
	ctrl = h.startController("controller-current-format2", newBin, append(h.controllerArgs(), "--snapshot-format=2"))
	if f := ctrl.metric("tollgate_controller_snapshot_format"); f != 2 {
		t.Errorf("tollgate_controller_snapshot_format = %v, want 2", f)
	}
	rule("t-three", 3)
	h.waitRules(newGW, 4)
	h.eventually("the earlier gateway reports refusing format 2", func() bool {
		return oldGW.metric(`tollgate_gateway_reload_errors_total{source="rules"}`) > refusedBefore
	})
	if f := newGW.metric("tollgate_gateway_snapshot_format"); f != 2 {
		t.Errorf("the current gateway loaded format %v, want 2", f)
	}
	if n := oldGW.metric("tollgate_gateway_rules"); n != 3 {
		t.Errorf("the earlier gateway has %v rules, want its last good 3", n)
	}
	h.expectAllowed("t-four", 2, 4, oldGW) // its last good snapshot, not the built-in default (20)

	// Back to the default format (what a rollback of the gateways needs):
	// the earlier gateway catches up.
	h.stop(ctrl)
	ctrl = h.startController("controller-current-again", newBin, h.controllerArgs())
	h.waitRules(oldGW, 4)
	h.expectAllowed("t-three", 3, 6, oldGW, newGW)

	// 3. The earlier controller takes over the snapshot (a controller
	// rollback, or the current gateway rolled out before the controller):
	// the current gateway reads its snapshot and follows its changes.
	h.stop(ctrl)
	ctrl = h.startController("controller-previous", oldBin, h.controllerArgs())
	rule("t-five", 3)
	h.waitRules(newGW, 5)
	h.waitRules(oldGW, 5)
	h.expectAllowed("t-five", 3, 6, newGW, oldGW)
	if f := newGW.metric("tollgate_gateway_snapshot_format"); f != 1 {
		t.Errorf("the current gateway loaded format %v from the earlier controller, want 1", f)
	}
	// A fresh gateway of the current version starts from that snapshot.
	newGW2 := h.startGateway("gateway-current-2", newBin)
	h.waitRules(newGW2, 5)
	h.expectAllowed("t-four", 0, 2, newGW2) // spent in step 2, on the shared bucket

	// 4. No 0.1 gateway left: gateways in the default, packed layout roll
	// out while gateways in compat-0.1 still run, and they share every
	// bucket.
	h.stop(oldGW)
	packedGW := h.startGateway("gateway-current-packed", newBin, "--redis-layout=packed")
	h.waitRules(packedGW, 5)
	h.expectAllowed("t-five", 0, 2, packedGW, newGW2) // spent in step 3
	rule("t-six", 3)
	h.waitRules(packedGW, 6)
	h.waitRules(newGW, 6)
	h.expectAllowed("t-six", 3, 6, newGW, packedGW)
	h.stop(ctrl)
}

// buildRevision builds previousRevision's tollgate from git archive into dir.
func buildRevision(t *testing.T, dir string) (string, error) {
	src := filepath.Join(dir, "previous-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	archive := exec.Command("bash", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "bash", root, previousRevision, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", previousRevision[:12], err, out)
	}
	if err := alignDeps(src); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tollgate-previous")
	// No .git in the copy: no VCS stamp. -mod=mod: go.mod was edited.
	if err := gobuild.Tollgate(src, bin, "GOFLAGS=-buildvcs=false -mod=mod"); err != nil {
		return "", err
	}
	t.Logf("built the previous revision %s in %v", previousRevision[:12], time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// alignDeps moves every module that the previous revision's go.mod shares
// with the current one to the current version, and adds the current go.sum.
// The previous revision then compiles against the packages the rest of the
// tests already built: on a cold build cache, compiling its older
// golang.org/x and Kubernetes-dependent packages a second time took about
// six minutes of CI. What this test checks, the snapshot formats, CRDs and
// Redis keys each version reads and writes, is tollgate's own code; the
// dependency updates since (patch and minor releases of golang.org/x,
// gnostic-models) do not take part in it.
func alignDeps(src string) error {
	current, err := requires(root)
	if err != nil {
		return err
	}
	previous, err := requires(src)
	if err != nil {
		return err
	}
	edit := []string{"mod", "edit"}
	for path, v := range previous {
		if cv, ok := current[path]; ok && cv != v {
			edit = append(edit, "-require="+path+"@"+cv)
		}
	}
	if len(edit) > 2 {
		cmd := exec.Command("go", edit...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(edit, " "), err, out)
		}
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(src, "go.sum"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(sums); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// requires reads the module versions dir's go.mod requires.
func requires(dir string) (map[string]string, error) {
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod edit -json in %s: %v", dir, err)
	}
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("go mod edit -json in %s: %v", dir, err)
	}
	versions := make(map[string]string, len(mod.Require))
	for _, r := range mod.Require {
		versions[r.Path] = r.Version
	}
	return versions, nil
}

// buildTree builds the working tree's tollgate into dir.
func buildTree(dir string) (string, error) {
	bin := filepath.Join(dir, "tollgate-current")
	return bin, gobuild.Tollgate(root, bin)
}

type harness struct {
	t                              *testing.T
	dir, kubeconfig, redis, routes string
	k8s                            client.Client
}

type proc struct {
	*proctest.Proc
	// url: a gateway's proxy; metrics: its /metrics URL.
	url, metrics string
}

func (h *harness) controllerArgs() []string {
	return []string{"controller", "--kubeconfig", h.kubeconfig, "--snapshot-namespace", namespace, "--leader-elect=false",
		"--metrics-bind-address", freeAddr(h.t), "--health-probe-bind-address", freeAddr(h.t)}
}

// startController starts a controller with args (controllerArgs and more)
// and waits until it is ready.
func (h *harness) startController(name, bin string, args []string) *proc {
	h.t.Helper()
	p := h.start(name, bin, args...)
	var probe string
	for i, a := range args {
		switch a {
		case "--metrics-bind-address":
			p.metrics = "http://" + args[i+1] + "/metrics"
		case "--health-probe-bind-address":
			probe = "http://" + args[i+1] + "/readyz"
		}
	}
	h.eventually(name+" ready", func() bool { return proctest.Status(probe) == 200 }, p)
	return p
}

// loggedVersion checks that p logged its start line (msg) with the
// version, commit and Go version that tollgate version prints.
func (h *harness) loggedVersion(p *proc, bin, msg string) {
	h.t.Helper()
	out, err := exec.Command(bin, "version", "--output", "json").Output()
	if err != nil {
		h.t.Fatal(err)
	}
	var v struct{ Version, Commit, GoVersion string }
	if err := json.Unmarshal(out, &v); err != nil {
		h.t.Fatal(err)
	}
	logs, _ := os.ReadFile(p.Log)
	for _, line := range strings.Split(string(logs), "\n") {
		var l struct{ Msg, Version, Commit, GoVersion string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			if l.Version != v.Version || l.Commit != v.Commit || l.GoVersion != v.GoVersion || v.Version == "" {
				h.t.Errorf("%s logged %s with %+v, tollgate version says %+v", p.Name, msg, l, v)
			}
			want := fmt.Sprintf(`tollgate_build_info{commit=%q,goversion=%q,version=%q}`, v.Commit, v.GoVersion, v.Version)
			if got := p.metric(want); got != 1 {
				h.t.Errorf("%s: %s = %v, want 1", p.Name, want, got)
			}
			return
		}
	}
	h.t.Errorf("%s did not log %q", p.Name, msg)
}

func (h *harness) start(name, bin string, args ...string) *proc {
	h.t.Helper()
	p := &proc{Proc: proctest.New(h.dir, name, bin, args...)}
	if err := p.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { h.stop(p) })
	return p
}

func (h *harness) stop(p *proc) { p.Stop(15 * time.Second) }

// startGateway starts a gateway of bin. Gateways of the current version run
// with --redis-layout=compat-0.1 (what docs/upgrading.md says to set while
// 0.1 gateways run) unless extra says otherwise.
func (h *harness) startGateway(name, bin string, extra ...string) *proc {
	h.t.Helper()
	listen, admin := freeAddr(h.t), freeAddr(h.t)
	args := []string{"gateway", "--kubeconfig", h.kubeconfig, "--snapshot-namespace", namespace,
		"--routes", h.routes, "--redis-addr", h.redis, "--listen", listen, "--admin-listen", admin,
		"--pod-name", name, "--lease-duration", "3s",
		// A generous deadline: a loaded machine must not turn a slow Redis
		// answer into a local decision where the test counts exactly.
		"--redis-timeout", "2s", "--shutdown-grace", "1s"}
	if strings.Contains(bin, "current") {
		// The earlier version took the X-Api-Key value as the tenant by
		// default; the current one maps keys unless told so.
		args = append(args, "--identity", "header-is-tenant", "--redis-layout=compat-0.1")
	}
	args = append(args, extra...)
	p := h.start(name, bin, args...)
	p.url, p.metrics = "http://"+listen, "http://"+admin+"/metrics"
	h.eventually(name+" ready", func() bool { return proctest.Status("http://"+admin+"/readyz") == 200 }, p)
	return p
}

// metric returns the value of one series from the process's /metrics (0
// when absent): name, or name{labels} exactly as exposed.
func (p *proc) metric(series string) float64 {
	res, err := http.Get(p.metrics)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func (h *harness) waitRules(p *proc, n float64) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("%s loads %v rules", p.Name, n), func() bool { return p.metric("tollgate_gateway_rules") == n }, p)
}

// expectAllowed sends n requests for tenant, round robin over gateways, and
// wants exactly allowed of them admitted and the others refused with 429.
func (h *harness) expectAllowed(tenant string, allowed, n int, gateways ...*proc) {
	h.t.Helper()
	got := 0
	for i := range n {
		g := gateways[i%len(gateways)]
		req, _ := http.NewRequest(http.MethodGet, g.url+"/orders", nil)
		req.Header.Set("X-Api-Key", tenant)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			h.t.Fatalf("%s: %v", g.Name, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusOK:
			got++
		case http.StatusTooManyRequests:
		default:
			h.t.Fatalf("%s answered %d for tenant %s", g.Name, res.StatusCode, tenant)
		}
	}
	if got != allowed {
		names := []string{}
		for _, g := range gateways {
			names = append(names, g.Name)
		}
		h.t.Errorf("tenant %s: %d of %d requests admitted through %v, want %d", tenant, got, n, names, allowed)
	}
}

func (h *harness) eventually(what string, cond func() bool, logs ...*proc) {
	h.t.Helper()
	ps := make([]*proctest.Proc, len(logs))
	for i, p := range logs {
		ps[i] = p.Proc
	}
	proctest.Eventually(h.t, time.Minute, 100*time.Millisecond, what, cond, ps...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
