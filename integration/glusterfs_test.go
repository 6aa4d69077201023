package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestStoreSuiteOnGlusterFS runs the store's tests (storeSuite: crash,
// damage, hostile links, quotas, refusals, fsck) once more with every
// store on a GlusterFS 10 client mount, as TestStoreSuiteOnMooseFS does
// on MooseFS: the filesystem whose refusal of renameat2's flags failed
// every send before the store had portable ways (README, "Several
// hosts"). A test that fails is run again alone, as there, and fails this
// one if it fails twice.
func TestStoreSuiteOnGlusterFS(t *testing.T) {
	if os.Getenv(storeDirEnv) != "" {
		t.Skip("inside the suite already")
	}
	g := startGlusterFS(t)
	keepFusectlAsIs(t)
	dir := filepath.Join(g.a, "suite")
	testkit.Must(t, os.Mkdir(dir, 0o755))
	failed, out := runSuiteOn(t, dir, storeSuite)
	if len(failed) > 0 {
		t.Logf("failed on GlusterFS at the first run, run again: %v\n%s", failed, errorLines(out, 40))
		again, out2 := runSuiteOn(t, dir, failed)
		for _, name := range again {
			t.Errorf("%s fails on GlusterFS twice:\n%s", name, errorLines(out2, 60))
		}
	}
}
