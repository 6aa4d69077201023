package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version describes this binary from its build info: the module version
// (v1.2.3 for `go install …@v1.2.3`, "(devel)" for a build in a checkout),
// the VCS revision and time when the build recorded them (not with
// -buildvcs=false), and the Go version and platform. One line, so that
// scripts and bug reports can quote it.
func version() string {
	v, extra := "(devel)", []string(nil)
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		extra = vcsInfo(bi.Settings)
	}
	extra = append(extra, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	return fmt.Sprintf("ctxfs %s (%s)", v, strings.Join(extra, ", "))
}

// vcsInfo is the revision (12 digits), its time and whether the tree had
// changes, as far as the build recorded them.
func vcsInfo(settings []debug.BuildSetting) []string {
	var rev, at string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var out []string
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified {
			rev += "+modified"
		}
		out = append(out, "revision "+rev)
	}
	if at != "" {
		out = append(out, at)
	}
	return out
}

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
