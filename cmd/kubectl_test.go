package cmd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
	"github.com/tollgate-dev/tollgate/internal/testutil/envtestutil"
	"github.com/tollgate-dev/tollgate/internal/testutil/gobuild"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func TestProgName(t *testing.T) {
	for argv0, want := range map[string]string{
		"tollgate": "tollgate", "/usr/local/bin/tollgate": "tollgate", "./kubectl-tollgate": "kubectl tollgate",
		"/home/me/.krew/bin/kubectl-tollgate": "kubectl tollgate", "kubectl-tollgate.exe": "kubectl tollgate", "kubectl-tollgate-old": "tollgate",
	} {
		if got := progName(filepath.ToSlash(argv0)); got != want {
			t.Errorf("progName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

// hostIP is an address of this machine that the API server accepts as a
// pod's (a global unicast IPv4 address, not loopback); "" when it has none.
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

func freePort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestKubectlPlugin: the binary installed as kubectl-tollgate on PATH
// answers the real kubectl's `kubectl tollgate top|reset|explain`, finding
// two gateways through the kubeconfig: their membership Leases (written by
// the gateways themselves, in cluster mode, with their admin port) name
// their pods, and the real API server's pod proxy carries the requests to
// the pods' addresses (Pod objects whose status holds this machine's
// address, where the gateways listen), the reset's token in
// X-Tollgate-Authorization.
func TestKubectlPlugin(t *testing.T) {
	ip := hostIP()
	if ip == "" {
		t.Skip("no global unicast address on this machine: the API server proxies only to such pod addresses")
	}
	env, cfg := envtestutil.Start(t)
	dir := t.TempDir()
	kubeconfig, err := envtestutil.WriteKubeconfig(env, dir)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns = "tollgate-system"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller's snapshot, as it would publish it: one rule.
	cm, err := snapshot.NewShard(0, 1, 1, []snapshot.Rule{{Tenant: "*", Route: "create-order", Capacity: 2, RefillTokens: 1,
		RefillPeriodMs: 7 * 24 * 3600 * 1000, Source: "shop/launch"}}).ConfigMap(ns, "tollgate-rules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Built before the requests: a cold build can take minutes, longer
	// than the top window the requests must still be in.
	plugin := filepath.Join(dir, "bin", "kubectl-tollgate")
	if err := gobuild.Tollgate(envtestutil.RepoRoot(), plugin); err != nil {
		t.Fatal(err)
	}

	srv := redistest.Start(t)
	site := newTestSite(t, "")
	var gws []*gateway.Gateway
	for i := range 2 {
		pod := fmt.Sprintf("gw-%d", i)
		startPod(t, cs, ns, pod, ip)
		port := freePort(t, ip)
		gws = append(gws, site.start(t, srv.Addr(), func(o *gateway.Options) {
			o.RulesPath, o.Kube.Path, o.SnapshotNamespace, o.PodName = "", kubeconfig, ns, pod
			o.AdminListen = net.JoinHostPort(ip, fmt.Sprint(port))
		}))
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ms, err := membership.List(ctx, cs, ns, "tollgate-gateway", time.Now())
		if err == nil && len(ms) == 2 && ms[0].AdminPort > 0 && ms[1].AdminPort > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateways' Leases: %v %v", ms, err)
		}
	}
	for i := range 5 {
		req, _ := http.NewRequest("POST", "http://"+gws[i%2].Addr()+"/orders", nil)
		req.Header.Set("X-Api-Key", "shop-a")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}

	kubectl := func(args ...string) string {
		t.Helper()
		bin, err := envtestutil.Kubectl()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		t.Logf("kubectl %s\n%s", strings.Join(args, " "), out.String())
		return out.String()
	}
	expect := func(out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("the output lacks %q:\n%s", w, out)
			}
		}
	}

	expect(kubectl("plugin", "list"), plugin)
	expect(kubectl("tollgate", "--help"), "kubectl tollgate [command]")
	expect(kubectl("tollgate", "top"), "on 2 gateways (gw-0, gw-1): 3 refused, 2 admitted; 1 distinct tenant refused",
		"shop-a  create-order  3", "shop/launch (*, create-order): capacity 2, 1/168h")
	expect(kubectl("tollgate", "explain", "--tenant", "shop-a", "--route", "create-order", "--pod", "gw-1"),
		"rule in force:  shop/launch (tenant *, route create-order)", "this gateway rejects requests of 1+ tokens without asking Redis")
	expect(kubectl("tollgate", "reset", "--tenant", "shop-a", "--route", "create-order", "--token-file", site.tokens),
		"gw-0: tenant shop-a on route create-order, bucket of the whole rule (rule shop/launch), by cli:",
		"rl:{shop-a}:create-order  0 -> 2 tokens (full: 2)", "gw-1: dropped what it held for the bucket (1 key)")
	expect(kubectl("tollgate", "explain", "--tenant", "shop-a", "--route", "create-order"), "Redis: nothing stored in rl:{shop-a} field create-order (full: 2 tokens)")
}

// startPod creates a Pod object named name whose status gives it the
// address ip, as the kubelet would report it.
func startPod(t *testing.T, cs kubernetes.Interface, ns, name, ip string) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "tollgate"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
