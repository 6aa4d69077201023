package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// holdRemoved, as the holder: makes n files in its directory, holds each
// by an O_PATH descriptor (which opens nothing through FUSE), removes
// them through the mount, and prints "ready" and then the removed files'
// inode numbers. At each line read, it opens every held descriptor again
// through /proc/self/fd (an open of the node the kernel holds) and
// prints what it read, "-ERRNO" when refused.
const holdRemoved = `
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
names = [os.path.join(d, "h%d" % i) for i in range(n)]
for p in names:
    with open(p, "w") as f: f.write("mine\n")
fds = [os.open(p, os.O_PATH) for p in names]
inos = [os.stat(p).st_ino for p in names]
for p in names:
    os.unlink(p)
print("ready", flush=True)
print(" ".join(str(i) for i in inos), flush=True)
for line in sys.stdin:
    out = []
    for fd in fds:
        try:
            with open("/proc/self/fd/%d" % fd) as f: out.append(f.read().strip() or "empty")
        except OSError as e:
            out.append("-%d" % e.errno)
    print(" ".join(out), flush=True)
`

// TestFreeTreeNodeOfAFreedInode: a node of a free tree stands for the
// store inode it was looked up as. The store gives a freed inode's number
// to the next file it makes; a descriptor uid 1001 kept of its own
// removed file must not then become a way to uid 1002's file of that
// number. uid 1001 holds O_PATH descriptors of files it removed; uid
// 1002's jailed program makes files mode 0644 in its root/ (private only
// by its home's 0700; written here into the store, where the jail's bind
// writes them, on an ext4 of one block group, which gives a freed number
// to the next file made), which uid 1002 then looks at through the
// mount; uid 1001
// reopens its descriptors and must read none of them. It did, in each
// run: go-fuse answered uid 1002's lookup with uid 1001's node of the same
// number (one generation for all), and that node's path became uid
// 1002's file.
func TestFreeTreeNodeOfAFreedInode(t *testing.T) {
	// A store of one block group: the store gives a freed number again
	// at the next file (the lowest free), wherever it is made.
	disk := smallExt4(t, 96)
	s := limitedServer(t, "freebytes=104857600", func(s *server) { s.store = filepath.Join(disk, "store") })
	rootA, _ := s.userTrees(t, uid1001, "a")
	rootB, _ := s.userTrees(t, uid1002, "b")
	const n = 200
	h := holdScript(t, holdRemoved, rootA, fmt.Sprint(n))
	in, out := h.in, h.out
	if !out.Scan() {
		t.Fatalf("the holder said no inodes: %v", out.Err())
	}
	held := map[string]bool{}
	for _, ino := range strings.Fields(out.Text()) {
		held[ino] = true
	}

	// The server closes a store file at FUSE's RELEASE, which the kernel
	// sends after close(2) returns: give the last removed files time to
	// be freed.
	time.Sleep(500 * time.Millisecond)
	reused := 0
	for i := 1; i <= 2*n; i++ {
		p := s.storePath(filepath.Join(rootB, fmt.Sprint("s", i)))
		testkit.Must(t, os.WriteFile(p, []byte(fmt.Sprintf("secret-%d\n", i)), 0o644))
		testkit.Must(t, os.Chown(p, 1002, 1002))
		if held[fmt.Sprint(statStore(t, p).Ino)] {
			reused++
		}
	}
	if o, err := runCmd(t, uid1002, nil, "/bin/bash", "-c", "cd "+rootB+" && stat s* > /dev/null"); err != nil {
		t.Fatalf("uid 1002 looks at its files: %v %s", err, o)
	}
	fmt.Fprintln(in, "read")
	if !out.Scan() {
		t.Fatal("the holder said nothing")
	}
	for _, got := range strings.Fields(out.Text()) {
		if strings.HasPrefix(got, "secret") {
			t.Fatalf("uid 1001 read uid 1002's file %q through a descriptor of its own removed file", got)
		}
	}
	if reused == 0 {
		t.Skip("the store gave none of the freed numbers to uid 1002's files: nothing was tried")
	}
	t.Logf("%d of uid 1002's files took a number of uid 1001's removed files; none was read", reused)
}
