package mountlife

import (
	"os"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// mountLoopback mounts a go-fuse loopback of a new directory, served by
// this process, and returns its mountpoint and connection device.
func mountLoopback(t *testing.T) (string, [2]uint64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it mounts FUSE and tmpfs")
	}
	const fusectlMagic = 0x65735543 // FUSE_CTL_SUPER_MAGIC
	var st unix.Statfs_t
	if unix.Statfs(fusectl, &st) != nil || st.Type != fusectlMagic {
		t.Cleanup(func() { unix.Unmount(fusectl, 0) }) // abortConn mounts it: leave the machine as it was
	}
	mnt, backing := t.TempDir(), t.TempDir()
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{FsName: "probetest", DirectMountStrict: true}})
	if err != nil {
		t.Fatalf("mount FUSE (/dev/fuse needed): %v", err)
	}
	t.Cleanup(func() {
		unix.Unmount(mnt, unix.MNT_DETACH)
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	dev, ok := fuseMountAt(mnt)
	if !ok {
		t.Fatalf("%s is not listed as a FUSE mount", mnt)
	}
	return mnt, dev
}

// TestProbeTellsHiddenFromDead: a FUSE mount that the path does not show
// (another mount over it) is neither live there nor dead: CleanStale
// leaves its connection alone, and a new server is not refused for it.
// Only an ended connection counts as dead.
func TestProbeTellsHiddenFromDead(t *testing.T) {
	mnt, dev := mountLoopback(t)
	if got := probe(mnt, dev); got != live {
		t.Fatalf("probe of a served mount = %d, want live", got)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if got := probe(mnt, dev); got != hidden {
		t.Errorf("probe under a tmpfs = %d, want hidden", got)
	}
	if LiveFUSEMount(mnt) {
		t.Error("LiveFUSEMount: true for a FUSE mount the path does not show")
	}
	if n := CleanStale(mnt); n != 0 {
		t.Errorf("CleanStale detached %d mounts under a tmpfs", n)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if got := probe(mnt, dev); got != live || !LiveFUSEMount(mnt) {
		t.Fatalf("after the tmpfs went: probe = %d, LiveFUSEMount = %v; want live (its connection must not have been touched)", got, LiveFUSEMount(mnt))
	}
	if abortConn(dev) == "" {
		t.Fatal("could not abort the connection through fusectl")
	}
	if got := probe(mnt, dev); got != dead {
		t.Errorf("probe of an aborted connection = %d, want dead", got)
	}
	if n := CleanStale(mnt); n != 1 || IsFUSEMount(mnt) {
		t.Errorf("CleanStale of a dead mount detached %d, still mounted: %v", n, IsFUSEMount(mnt))
	}
}
