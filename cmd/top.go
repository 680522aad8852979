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
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/dataplane/top"
)

// topOptions are the flags of "tollgate top".
type topOptions struct {
	gw     gatewayFlags
	limit  int
	output string
}

func newTopCommand(prog string) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top [--gateways ADDR,...]",
		Short: "Show the tenants refused most right now, across every gateway",
		Long: `Ask every gateway (its admin port, GET /debug/top) which tenants and routes
it refused most over its sliding window (--top-window, default the last
minute), merge the answers and print them with the rule in force for each:
refusals, admissions, and how many distinct tenants were refused.

Each gateway keeps a fixed-size summary, never a metric per tenant: with R
refusals in the window and K pairs tracked (--top-k), a pair's count is an
upper bound at most R/K above the truth (the range is printed when it is
not exact), and every pair refused more than R/K times is listed.
Admissions are counted while a pair is tracked: a lower bound. The
distinct tenant count is a HyperLogLog estimate (1.6% standard error).

Without --gateways the gateways are found through the kubeconfig: their
membership Leases in the namespace name their pods and admin ports, and
the requests go through the API server's pod proxy with your own
credentials (get on pods/proxy and list on leases in the namespace).`,
		Example: "  " + prog + ` top
  ` + prog + ` top -n tollgate-system --limit 10 -o json
  tollgate top --gateways 10.0.0.5:9090,10.0.0.6:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	o.gw.addFlags(fs)
	fs.IntVar(&o.limit, "limit", 20, "Pairs to show, 1 to 10000.")
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text or json (the merged report).")
	return cmd
}

func (o *topOptions) run(ctx context.Context, out io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output: %q: want text or json", o.output)
	}
	if o.limit < 1 || o.limit > 10_000 {
		return fmt.Errorf("--limit: want 1 to 10000, not %d", o.limit)
	}
	targets, err := o.gw.targets(ctx)
	if err != nil {
		return err
	}
	reports, failed := askAll(ctx, targets)
	if len(reports) == 0 {
		return fmt.Errorf("no gateway answered: %s", strings.Join(failed, "; "))
	}
	merged, err := top.Merge(reports, o.limit)
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(merged)
	}
	return writeTop(out, merged, reports, failed)
}

// askAll asks every target for its report at once; failed lists the
// errors of those that did not answer.
func askAll(ctx context.Context, targets []target) (reports []top.Report, failed []string) {
	results := make([]top.Report, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			// Every pair a gateway tracks: a pair may rank low on each
			// gateway and high on all of them together.
			errs[i] = t.call(ctx, "GET", "/debug/top", url.Values{"limit": {"10000"}}, "", &results[i])
			if results[i].Gateway == "" {
				results[i].Gateway = t.name
			}
		})
	}
	wg.Wait()
	for i := range targets {
		if errs[i] != nil {
			failed = append(failed, errs[i].Error())
			continue
		}
		reports = append(reports, results[i])
	}
	return reports, failed
}

// writeTop prints the merged report for a person.
func writeTop(out io.Writer, m top.Report, reports []top.Report, failed []string) error {
	var gws []string
	for _, r := range reports {
		gws = append(gws, r.Gateway)
	}
	fmt.Fprintf(out, "refused most over the last %ss on %s (%s): %d refused, %d admitted; %s refused (estimated)\n",
		strconv.FormatFloat(math.Round(m.WindowSeconds), 'f', -1, 64), plural(len(reports), "gateway"), strings.Join(gws, ", "),
		m.Rejections, m.Admissions, plural(int(math.Round(m.RefusedTenants)), "distinct tenant"))
	for _, f := range failed {
		fmt.Fprintf(out, "warning: not counted: %s\n", f)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tROUTE\tREFUSED\tADMITTED (AT LEAST)\tRULE IN FORCE")
	for _, e := range m.Entries {
		refused := strconv.FormatInt(e.Rejections, 10)
		if e.Error > 0 {
			refused = fmt.Sprintf("%d-%d", e.Rejections-e.Error, e.Rejections)
		}
		rule := "?"
		if r := e.Rule; r != nil {
			rule = fmt.Sprintf("%s (%s, %s): capacity %d, %s", r.Source, r.Tenant, r.Route, r.Capacity, r.Rate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", e.Tenant, e.Route, refused, e.Admissions, rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Entries) == 0 {
		fmt.Fprintln(out, "(no refusal in the window)")
	}
	_, err := fmt.Fprintf(out, "\npairs not listed were refused at most %d times in the window\n", m.Floor)
	return err
}
