package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/dataplane/explain"
	"github.com/tollgate-dev/tollgate/dataplane/reset"
)

// resetOptions are the flags of "tollgate reset".
type resetOptions struct {
	gw            gatewayFlags
	tenant, route string
	tokens        int64
	quota         bool
	tokenFile     string
	output        string
}

func newResetCommand(prog string) *cobra.Command {
	o := &resetOptions{}
	cmd := &cobra.Command{
		Use:   "reset --tenant T --route R [--tokens N] [--quota]",
		Short: "Set a tenant's bucket (or quota) on a route to full or to N tokens, on every gateway",
		Long: `Set tenant T's bucket on route R in Redis to full, or to N tokens with
--tokens; with --quota, set what is left of its calendar quota in the
current period instead (full: the period's count back to 0). Every key the
bucket uses is set: the region's share (N x percent / 100) and each shard
(N split over them), each by one atomic script call that reads Redis's
clock; the answer shows each key's tokens before and after.

It asks one gateway per region (regions keep buckets of their own) to set
the keys, then every other gateway to drop what it holds for the bucket
(prefetched tokens, a cached "empty"), so that no gateway keeps refusing
what the reset allows.

A reset is a mutation: the gateways accept it only with a bearer token of
their --admin-token-file (--token-file here, or $TOLLGATE_ADMIN_TOKEN);
without that file they refuse it (403). Each reset is logged by the
gateway under the token's name (or fingerprint) with the before and after
values, and counted in tollgate_gateway_admin_mutations_total.`,
		Example: "  " + prog + ` reset --tenant shop-a --route create-order --token-file ~/.tollgate/token
  ` + prog + ` reset --tenant shop-a --route create-order --tokens 50 --token-file ~/.tollgate/token
  ` + prog + ` reset --tenant shop-a --route create-order --quota --token-file ~/.tollgate/token
  tollgate reset --tenant shop-a --route create-order --gateways 127.0.0.1:9090 --token-file token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.Flags().Changed("tokens"))
		},
	}
	fs := cmd.Flags()
	o.gw.addFlags(fs)
	fs.StringVar(&o.tenant, "tenant", "", "Tenant id (required; never an API key).")
	fs.StringVar(&o.route, "route", "", "Route id (required).")
	fs.Int64Var(&o.tokens, "tokens", 0, "Tokens to leave, for the whole rule (a region gets its share). Default: full.")
	fs.BoolVar(&o.quota, "quota", false, "Set what is left of the calendar quota in the current period, instead of the bucket.")
	fs.StringVar(&o.tokenFile, "token-file", "", "File holding the admin token (its first token line; a gateway's --admin-token-file works). Default: $TOLLGATE_ADMIN_TOKEN.")
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text or json (every gateway's answer).")
	return cmd
}

// resetRun is what one reset did: the answers of the gateways that set
// the keys, and of those that forgot the bucket.
type resetRun struct {
	Reset  []reset.Answer    `json:"reset"`
	Forgot []reset.Forgotten `json:"forgot"`
}

func (o *resetOptions) run(ctx context.Context, out io.Writer, tokensSet bool) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output: %q: want text or json", o.output)
	}
	if err := explain.ValidateQuery(o.tenant, o.route); err != nil {
		return fmt.Errorf("--%w", err)
	}
	q := url.Values{"tenant": {o.tenant}, "route": {o.route}}
	if o.quota {
		q.Set("part", string(reset.PartQuota))
	}
	if tokensSet {
		if o.tokens < 0 || o.tokens > reset.MaxTokens {
			return fmt.Errorf("--tokens: want 0 to %d, not %d", int64(reset.MaxTokens), o.tokens)
		}
		q.Set("tokens", strconv.FormatInt(o.tokens, 10))
	}
	token, err := readToken(o.tokenFile)
	if err != nil {
		return err
	}
	targets, err := o.gw.targets(ctx)
	if err != nil {
		return err
	}
	writers, others, err := o.byRegion(ctx, targets)
	if err != nil {
		return err
	}
	run, resetErrs, forgetErrs := o.apply(ctx, writers, others, q, token)
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(run); err != nil {
			return err
		}
	} else {
		writeReset(out, o.tenant, o.route, run)
	}
	switch {
	case len(resetErrs) > 0:
		return fmt.Errorf("reset failed: %s", strings.Join(append(resetErrs, forgetErrs...), "; "))
	case len(forgetErrs) > 0:
		return fmt.Errorf("the keys are set, but these gateways may answer from what they held until the bucket could have refilled: %s", strings.Join(forgetErrs, "; "))
	}
	return nil
}

// apply asks the writers to set the keys, then the others to forget the
// bucket, and collects the errors of each step.
func (o *resetOptions) apply(ctx context.Context, writers, others []target, q url.Values, token string) (run resetRun, resetErrs, forgetErrs []string) {
	for _, t := range writers {
		var a reset.Answer
		if err := t.call(ctx, "POST", "/debug/reset", q, token, &a); err != nil {
			resetErrs = append(resetErrs, err.Error())
			continue
		}
		run.Reset = append(run.Reset, a)
	}
	for _, t := range others {
		var f reset.Forgotten
		if err := t.call(ctx, "POST", "/debug/forget", url.Values{"tenant": {o.tenant}, "route": {o.route}}, token, &f); err != nil {
			forgetErrs = append(forgetErrs, err.Error())
			continue
		}
		run.Forgot = append(run.Forgot, f)
	}
	return run, resetErrs, forgetErrs
}

// byRegion asks each target which region's keys it uses for the bucket
// (GET /debug/explain, read-only) and returns one gateway per region, to
// set the keys, and the others, to forget the bucket.
func (o *resetOptions) byRegion(ctx context.Context, targets []target) (writers, others []target, err error) {
	if len(targets) == 1 {
		return targets, nil, nil
	}
	seen := map[string]bool{}
	q := url.Values{"tenant": {o.tenant}, "route": {o.route}}
	for _, t := range targets {
		var r explain.Report
		if err := t.call(ctx, "GET", "/debug/explain", q, "", &r); err != nil {
			return nil, nil, err
		}
		if seen[r.Region] {
			others = append(others, t)
			continue
		}
		seen[r.Region] = true
		writers = append(writers, t)
	}
	return writers, others, nil
}

// writeReset prints what a reset did.
func writeReset(out io.Writer, tenant, route string, run resetRun) {
	for _, a := range run.Reset {
		where := "the whole rule"
		if a.Region != "" {
			where = fmt.Sprintf("region %s (%d%%)", a.Region, a.RegionPercent)
		}
		what := "tokens"
		if a.Part == reset.PartQuota {
			what = "tokens left in the quota's period"
		}
		fmt.Fprintf(out, "%s: tenant %s on route %s, %s of %s (rule %s), by %s:\n", a.Gateway, tenant, route, a.Part, where, a.Source, a.Who)
		for _, k := range a.Keys {
			fmt.Fprintf(out, "  %s  %s -> %s %s (full: %s)\n", k.Key, num(k.Before), num(k.After), what, num(k.Capacity))
		}
		if len(a.Keys) > 1 {
			fmt.Fprintf(out, "  total  %s -> %s (full: %s)\n", num(a.Before), num(a.After), num(a.Capacity))
		}
	}
	for _, f := range run.Forgot {
		fmt.Fprintf(out, "%s: dropped what it held for the bucket (%s)\n", f.Gateway, plural(f.Buckets, "key"))
	}
}

// num prints tokens with at most three decimals.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64)
}
