package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// newFollower starts `ctxfs mount --follow` of w's store at a root of its
// own (a follower host of a cluster, on this machine) and returns once
// both its mounts are up. It serves no socket; it is killed at the test's
// end.
func newFollower(t *testing.T, w *server) *server {
	t.Helper()
	base := t.TempDir()
	os.Chmod(base, 0o755)
	f := &server{t: t, root: filepath.Join(base, "ctx"), store: w.store, args: []string{"--follow"}}
	f.launch()
	openToAll(t, f.root)
	waitUntil(t, 20*time.Second, func() bool {
		return mountsAt(f.mnt("home")) == 1 && mountsAt(f.mnt("shared")) == 1
	}, func() string { return "the follower did not mount; its log:\n" + f.logText() })
	return f
}
