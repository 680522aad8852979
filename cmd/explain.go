package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
)

// explainOptions are the flags of "tollgate explain".
type explainOptions struct {
	tenant, route, admin, output, pod string
	// address is the client address for the rules keyed by it.
	address string
	gw      gatewayFlags
	// kubectl: run as kubectl tollgate, where the gateways are found
	// through the kubeconfig unless --admin is given.
	kubectl bool
}

func newExplainCommand(prog string) *cobra.Command {
	o := &explainOptions{kubectl: prog != "tollgate"}
	cmd := &cobra.Command{
		Use:   "explain --tenant T --route R [--admin HOST:PORT | --pod POD]",
		Short: "Show what decides a tenant's requests on a route, asking a gateway's admin port",
		Long: `Ask one gateway (its admin port, GET /debug/explain) what decides tenant T's
requests on route R, without taking a token:

  - the rule in force (namespace/name, or the built-in default) and the
    precedence step that chose it (tenant and route, tenant and any route,
    any tenant and route, any tenant and any route, built-in default);
  - the bucket key(s): the region's share and the shards, if any;
  - each bucket's state in Redis (tokens now, refilled to Redis's clock,
    where it is stored, and the TTL), read with read-only commands (HGET, and
    PTTL and TIME in an EVAL_RO script) that cannot modify it;
  - the prefetched tokens this gateway holds, the breaker state of each Redis
    node, the live replica count N, and the local fallback's bucket;
  - when rules of other kinds stack on it (spec.by, spec.shared: a
    tenant's budget across routes, a limit per client address given with
    --address, a shared ceiling), every limit that applies, its bucket and
    its tokens, and the one that decides now.

It takes a tenant id, never an API key (with --identity mapped, look the
tenant up in your key file), and its output holds no key. Each gateway holds
its own prefetched tokens and local buckets: ask the one that served the
request (kubectl port-forward pod/<gateway pod> 9090, or --pod).

As kubectl tollgate, or with --pod, the gateway is found through the
kubeconfig (its membership Lease; the request goes through the API
server's pod proxy): --pod, else the first live gateway.`,
		Example: `  kubectl -n tollgate-system port-forward deploy/tollgate-gateway 9090 &
  tollgate explain --tenant shop-a --route create-order
  tollgate explain --tenant shop-a --route create-order --output json
  kubectl tollgate explain --tenant shop-a --route create-order --pod tollgate-gateway-7d9f-x2k`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.Flags().Changed("admin"))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.tenant, "tenant", "", "Tenant id (required; never an API key).")
	fs.StringVar(&o.route, "route", "", "Route id (required).")
	fs.StringVar(&o.address, "address", "", "Client address, for the rules keyed by clientAddress (optional).")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9090", "The gateway's admin listener (its --admin-listen), host:port or an http(s) URL.")
	fs.StringVar(&o.pod, "pod", "", "Ask this gateway pod, found through the kubeconfig (default as kubectl tollgate: the first live gateway).")
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text or json.")
	o.gw.addKubeFlags(fs)
	return cmd
}

func (o *explainOptions) run(ctx context.Context, out io.Writer, adminSet bool) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output: %q: want text or json", o.output)
	}
	if err := explain.ValidateQuery(o.tenant, o.route); err != nil {
		return fmt.Errorf("--%w", err)
	}
	t, err := o.target(ctx, adminSet)
	if err != nil {
		return err
	}
	q := url.Values{"tenant": {o.tenant}, "route": {o.route}}
	if o.address != "" {
		if _, err := netip.ParseAddr(o.address); err != nil {
			return fmt.Errorf("--address: %q is not an IP address", o.address)
		}
		q.Set("address", o.address)
	}
	var body json.RawMessage
	if err := t.call(ctx, "GET", "/debug/explain", q, "", &body); err != nil {
		return err
	}
	if o.output == "json" {
		_, err := out.Write(body)
		return err
	}
	var r explain.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("the gateway %s answered something else than an explanation: %w", t.name, err)
	}
	return r.WriteText(out)
}

// target is --admin, else (as kubectl tollgate, or with --pod) --pod or
// the first gateway found through the kubeconfig.
func (o *explainOptions) target(ctx context.Context, adminSet bool) (target, error) {
	if adminSet || (!o.kubectl && o.pod == "") {
		ts, err := directTargets([]string{o.admin}, o.gw.timeout)
		if err != nil {
			return target{}, fmt.Errorf("--admin: %q is not host:port or a URL", o.admin)
		}
		return ts[0], nil
	}
	ts, err := o.gw.discover(ctx)
	if err != nil {
		return target{}, err
	}
	if o.pod == "" {
		return ts[0], nil
	}
	for _, t := range ts {
		if t.name == o.pod {
			return t, nil
		}
	}
	return target{}, fmt.Errorf("--pod: %s is not a live gateway in namespace %s (live: %s)", o.pod, o.gw.namespace, names(ts))
}
