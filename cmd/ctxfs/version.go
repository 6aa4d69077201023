package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/internal/buildinfo"
)

// version is the one line of --version, `ctxfs version` and the log's
// start line (internal/buildinfo).
func version() string { return "ctxfs " + buildinfo.Read().String() }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of ctxfs",
		Long:    "Version prints the version of this binary, as --version does: the module version, the VCS revision and time when the build recorded them, and the Go version.",
		Example: "  ctxfs version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version())
			return nil
		},
	}
}
