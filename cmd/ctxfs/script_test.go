package main

import (
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ctxfs/ctxfs/internal/scriptcmd"
)

// TestMain lets scripts run this package's main as "ctxfs", and as the
// mount helper under its own name.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"ctxfs": main, helperName: main})
}

// TestScripts runs testdata/script/*.txtar: the command line itself (help,
// version, completion, usage errors and their exit statuses, the mount
// helper's options). Nothing in them mounts; the integration tests do.
//
// Environment: CTX_ROOT=$WORK/root, CTXFS_STORE=$WORK/store (neither made).
// Commands: exits N CMD ARGS... (the exact exit status).
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(e *testscript.Env) error {
			e.Setenv("CTX_ROOT", filepath.Join(e.WorkDir, "root"))
			e.Setenv("CTXFS_STORE", filepath.Join(e.WorkDir, "store"))
			e.Setenv("HOME", e.WorkDir)
			return nil
		},
		Cmds: map[string]func(*testscript.TestScript, bool, []string){"exits": scriptcmd.Exits},
	})
}
