package integration

import (
	"testing"

	"github.com/ctxfs/ctxfs/internal/storetest"
)

// snapshot is the store byte for byte, without the server's own
// bookkeeping (run journal, lock, log), for "nothing was written" checks.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	return storetest.Snapshot(t, dir, func(rel string) bool {
		return rel == ".ctxfs" || rel == ".ctxfs.lock" || rel == "ctxfs.log"
	})
}

func same(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	storetest.Same(t, what, before, after)
}
