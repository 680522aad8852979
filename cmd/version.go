package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version, build date and snapshot formats",
		Long: `Print which tollgate this is: its release version (the repository's VERSION
file), the commit and date it was built from, the Go version, and the rule
snapshot formats it reads and writes (a gateway refuses a snapshot format it
does not read; see docs/upgrading.md).

The gateway and the controller log the same fields when they start, and
export them as the metric tollgate_build_info{version,commit,goversion}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "text":
				return info.WriteText(cmd.OutOrStdout())
			case "json":
				return info.WriteJSON(cmd.OutOrStdout())
			default:
				return fmt.Errorf("--output %q: want text or json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "Output format: text or json.")
	return cmd
}
