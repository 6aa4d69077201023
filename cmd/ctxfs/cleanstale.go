package main

import (
	"fmt"
	"path/filepath"
	"strings"

	ctxfs "github.com/ctxfs/ctxfs/fs"
)

// cmdCleanStale detaches every ctxfs mount that no live server answers for
// (CI runs it before the tests: a dead mount would hang them). It never
// touches another filesystem, nor a mount whose root a live server holds,
// even if that server is slow to answer. Each probe of a dead mount ends
// within a second, freed by the abort that follows it.
//
// --under DIR limits it to mounts below DIR (tests use it, so as to leave
// the rest of the machine alone).
func cmdCleanStale(args []string) error {
	f, err := parseFlags(args, []string{"under"}, nil)
	if err != nil {
		return err
	}
	under, err := f.absFlag("under", "/")
	if err != nil || len(f.args) > 0 {
		return usageError("usage: ctxfs clean-stale [--under DIR]")
	}
	keep := func(dir string) bool {
		return !strings.HasPrefix(dir, strings.TrimSuffix(under, "/")+"/") || servedByLiveServer(dir)
	}
	for _, d := range ctxfs.CleanDeadCtxfs(keep) {
		fmt.Printf("ctxfs: cleaned the dead mount %s\n", d)
	}
	return nil
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
