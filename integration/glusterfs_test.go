package integration

import (
	"os"
	"testing"
)

// TestStoreSuiteOnGlusterFS runs the store's tests (storeSuite: crash,
// damage, hostile links, quotas, refusals, fsck) once more with every
// store on a GlusterFS 10 client mount, as TestStoreSuiteOnMooseFS does
// on MooseFS: the filesystem whose refusal of renameat2's flags failed
// every send before the store had portable ways (README, "Several
// hosts").
func TestStoreSuiteOnGlusterFS(t *testing.T) {
	if os.Getenv(storeDirEnv) != "" {
		t.Skip("inside the suite already")
	}
	storeSuiteOn(t, "GlusterFS", startGlusterFS(t).a)
}
