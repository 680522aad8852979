package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
)

// explainOptions are the flags of "tollgate explain".
type explainOptions struct {
	tenant, route, admin, output string
	timeout                      time.Duration
}

func newExplainCommand() *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain --tenant T --route R [--admin HOST:PORT]",
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
    node, the live replica count N, and the local fallback's bucket.

It takes a tenant id, never an API key (with --identity mapped, look the
tenant up in your key file), and its output holds no key. Each gateway holds
its own prefetched tokens and local buckets: ask the one that served the
request (kubectl port-forward pod/<gateway pod> 9090).`,
		Example: `  kubectl -n tollgate-system port-forward deploy/tollgate-gateway 9090 &
  tollgate explain --tenant shop-a --route create-order
  tollgate explain --tenant shop-a --route create-order --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.tenant, "tenant", "", "Tenant id (required; never an API key).")
	fs.StringVar(&o.route, "route", "", "Route id (required).")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9090", "The gateway's admin listener (its --admin-listen), host:port or an http(s) URL.")
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text or json.")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "Time to wait for the gateway's answer.")
	return cmd
}

func (o *explainOptions) run(out io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output: %q: want text or json", o.output)
	}
	if err := explain.ValidateQuery(o.tenant, o.route); err != nil {
		return fmt.Errorf("--%w", err)
	}
	base := o.admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--admin: %q is not host:port or a URL", o.admin)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/debug/explain"
	u.RawQuery = url.Values{"tenant": {o.tenant}, "route": {o.route}}.Encode()
	client := &http.Client{Timeout: o.timeout}
	res, err := client.Get(u.String())
	if err != nil {
		return fmt.Errorf("asking the gateway at %s: %w", o.admin, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("reading the gateway's answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("the gateway at %s answered %s: %s", o.admin, res.Status, e.Error)
		}
		return fmt.Errorf("the gateway at %s answered %s (is it a tollgate gateway's admin port?)", o.admin, res.Status)
	}
	if o.output == "json" {
		_, err := out.Write(body)
		return err
	}
	var r explain.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("the gateway at %s answered something else than an explanation: %w", o.admin, err)
	}
	return r.WriteText(out)
}
