package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

func newCleanStaleCommand() *cobra.Command {
	var under string
	cmd := &cobra.Command{
		Use:   "clean-stale",
		Short: "Detach the ctxfs mounts of the machine that no live server answers for",
		Long: `Clean-stale detaches every ctxfs mount that no live server answers for (the
leftovers of killed servers: a dead mount would hang whoever touches it).
It never touches another filesystem, nor a mount whose root a live server
holds, even if that server is slow to answer. Each probe of a dead mount
ends within a second, freed by the abort that follows it. --under limits it
to the mounts below a directory.`,
		Example: `  ctxfs clean-stale
  ctxfs clean-stale --under /tmp`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			dir, err := absOr(under, "/")
			if err != nil {
				return err
			}
			cleanStale(dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&under, "under", "", "only the mounts below this `DIR` (default /, all of them)")
	cmd.MarkFlagDirname("under")
	return cmd
}

// cleanStale detaches the dead ctxfs mounts below under (CI runs it
// before the tests).
func cleanStale(under string) {
	keep := func(dir string) bool {
		return !strings.HasPrefix(dir, strings.TrimSuffix(under, "/")+"/") || servedByLiveServer(dir)
	}
	for _, d := range mountlife.CleanDeadCtxfs(keep) {
		sayCleaned(d)
	}
}

// sayCleaned tells, on stdout, that the dead mount at dir was detached
// (clean-stale and umount say it alike).
func sayCleaned(dir string) {
	fmt.Printf("ctxfs: cleaned the dead mount %s (no server answered for it)\n", dir)
}

// servedByLiveServer reports whether dir (ROOT/home or ROOT/shared) belongs
// to a live server of ROOT.
func servedByLiveServer(dir string) bool {
	if b := filepath.Base(dir); b != "home" && b != "shared" {
		return false
	}
	h, _, err := rootHolder(filepath.Dir(dir))
	return err == nil && h.live()
}
