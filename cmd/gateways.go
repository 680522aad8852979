package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tollgate-dev/tollgate/dataplane/admintoken"
	"github.com/tollgate-dev/tollgate/dataplane/membership"
)

// How `tollgate top`, `reset` and (as kubectl tollgate) `explain` reach the
// gateways' admin listeners: at addresses given with --gateways, or through
// the current kubeconfig: the gateways' membership Leases name their pods
// and admin ports, and the API server's pod proxy
// (/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/...) carries the
// requests, with the caller's own Kubernetes credentials (get on pods/proxy
// to read, create to reset).

// gatewayFlags find the gateways.
type gatewayFlags struct {
	addrs      []string
	kubeconfig string
	context    string
	namespace  string
	group      string
	adminPort  int
	timeout    time.Duration
}

func (f *gatewayFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.addrs, "gateways", nil,
		"Admin listeners of the gateways (host:port or http(s) URLs, comma-separated). Default: every live gateway found through the kubeconfig.")
	f.addKubeFlags(fs)
}

// addKubeFlags registers the flags of the discovery through a kubeconfig.
func (f *gatewayFlags) addKubeFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file. Default: $KUBECONFIG or ~/.kube/config (as kubectl).")
	fs.StringVar(&f.context, "context", "", "The kubeconfig context to use. Default: the current context.")
	fs.StringVarP(&f.namespace, "namespace", "n", "tollgate-system", "Namespace of the gateways (their membership Leases).")
	fs.StringVar(&f.group, "membership-group", "",
		"The gateways' --membership-group (the chart's: <release>-gateway). Default: the one group of live gateways in the namespace.")
	fs.IntVar(&f.adminPort, "admin-port", 9090, "Admin port of a gateway whose Lease does not publish it.")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "Time to wait for each gateway's answer.")
}

// target is one gateway's admin listener.
type target struct {
	// name is the address, or the pod.
	name string
	// base is the URL the admin paths are appended to.
	base string
	// header carries the bearer token: Authorization, or through the API
	// server's proxy (which consumes Authorization) admintoken.Header.
	header string
	client *http.Client
}

// directTargets are the gateways at addrs.
func directTargets(addrs []string, timeout time.Duration) ([]target, error) {
	var out []target
	for _, a := range addrs {
		base := strings.TrimSpace(a)
		if base == "" {
			continue
		}
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		u, err := url.Parse(base)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("--gateways: %q is not host:port or an http(s) URL", a)
		}
		out = append(out, target{name: a, base: strings.TrimSuffix(u.String(), "/"), header: "Authorization", client: &http.Client{Timeout: timeout}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--gateways: no address")
	}
	return out, nil
}

// targets are the gateways of --gateways, else those found through the
// kubeconfig.
func (f *gatewayFlags) targets(ctx context.Context) ([]target, error) {
	if len(f.addrs) > 0 {
		return directTargets(f.addrs, f.timeout)
	}
	return f.discover(ctx)
}

// discover lists the live gateways from their Leases.
func (f *gatewayFlags) discover(ctx context.Context) ([]target, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "" {
		rules.ExplicitPath = f.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the gateways through the kubeconfig (or give --gateways): %w", err)
	}
	cfg.UserAgent = "tollgate-cli"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	group, err := f.findGroup(ctx, cs)
	if err != nil {
		return nil, err
	}
	members, err := membership.List(ctx, cs, f.namespace, group, time.Now())
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("no live gateway in namespace %s (group %s): no Lease renewed within its duration", f.namespace, group)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	client.Timeout = f.timeout
	host := strings.TrimSuffix(cfg.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	var out []target
	for _, m := range members {
		port := m.AdminPort
		if port == 0 {
			port = f.adminPort
		}
		base := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s:%d/proxy", host, url.PathEscape(f.namespace), url.PathEscape(m.Pod), port)
		out = append(out, target{name: m.Pod, base: base, header: admintoken.Header, client: client})
	}
	return out, nil
}

// findGroup is --membership-group, else the one group of live gateways
// in the namespace.
func (f *gatewayFlags) findGroup(ctx context.Context, cs kubernetes.Interface) (string, error) {
	if f.group != "" {
		return f.group, nil
	}
	groups, err := membership.Groups(ctx, cs, f.namespace, time.Now())
	if err != nil {
		return "", err
	}
	switch len(groups) {
	case 0:
		return "", fmt.Errorf("no gateway Leases (label %s) in namespace %s: give -n with the gateways' namespace, or --gateways", membership.LabelGroup, f.namespace)
	case 1:
		return groups[0], nil
	}
	return "", fmt.Errorf("gateways of several groups in namespace %s (%s): give --membership-group", f.namespace, strings.Join(groups, ", "))
}

// call sends a request to t's admin path and decodes a 2xx JSON answer
// into out; any other answer is an error with the gateway's message.
func (t target) call(ctx context.Context, method, path string, query url.Values, token string, out any) error {
	u := t.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set(t.header, "Bearer "+token)
	}
	res, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("asking the gateway at %s: %w", t.name, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of the gateway %s: %w", t.name, err)
	}
	if res.StatusCode/100 != 2 {
		// The gateway's {"error"}, or the API server's Status {"message"}.
		var e struct{ Error, Message string }
		if json.Unmarshal(body, &e) == nil && e.Error+e.Message != "" {
			return fmt.Errorf("the gateway %s answered %s: %s", t.name, res.Status, e.Error+e.Message)
		}
		return fmt.Errorf("the gateway %s answered %s (is it a tollgate gateway's admin port?)", t.name, res.Status)
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = body
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the gateway %s answered something unexpected: %w", t.name, err)
	}
	return nil
}

// readToken reads the admin token: the first token line of file, else
// $TOLLGATE_ADMIN_TOKEN.
func readToken(file string) (string, error) {
	if file == "" {
		if t := strings.TrimSpace(os.Getenv("TOLLGATE_ADMIN_TOKEN")); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("--token-file: required (or $TOLLGATE_ADMIN_TOKEN): reset is a mutation, the gateways accept it only with one of their --admin-token-file's tokens")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, tok, named := strings.Cut(line, " "); named {
			line = strings.TrimSpace(tok)
		}
		return line, nil
	}
	return "", fmt.Errorf("--token-file: %s holds no token", file)
}

// names lists the targets' names.
func names(ts []target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.name)
	}
	return strings.Join(s, ", ")
}

// plural is "1 gateway", "3 gateways".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
