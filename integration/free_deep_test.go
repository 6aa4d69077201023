package integration

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deepMove makes, in dir, a chain of directories 18 deep (names of 200
// bytes) and moves dir/bag to its bottom: both paths of the rename are
// short enough, but what bag holds then lies past PATH_MAX from the
// store's top. It prints the chain's bottom, relative to dir.
const deepMove = `
import os, sys
d = sys.argv[1]
os.chdir(d)
chain = []
for i in range(18):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
    chain.append("d" * 200)
os.rename(os.path.join(d, "bag"), "bag")
print(len(chain), "/".join(chain))
`

// TestFreeQuotaDeepTree: bytes a user moved below a path the server
// cannot name (past PATH_MAX from the store's top: the rename's own
// paths were short) are still counted when its use is counted again (a
// restart): uid 1001 keeps three quarters of its quota there, and after
// a restart may write only the last quarter. The count walked the store
// by paths, lost what lay below (ENAMETOOLONG), and a uid could fill its
// quota again at each count.
func TestFreeQuotaDeepTree(t *testing.T) {
	const quota = 1 << 20
	s := limitedServer(t, fmt.Sprintf("freebytes=%d", quota), nil)
	root, _ := s.userTrees(t, uid1001, "deep")
	b := strings.Repeat("b", 200)
	in := filepath.Join(root, "bag", b, b, b)
	if out, err := runCmd(t, uid1001, nil, "mkdir", "-p", in); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	if n, why := pyAs(t, uid1001, fillFile, filepath.Join(in, "big"), "65536", fmt.Sprint(quota*3/4)); why != "none" {
		t.Fatalf("three quarters of the quota: %d bytes, %s", n, why)
	}
	out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", deepMove, root)
	f := strings.Fields(out)
	if err != nil || len(f) != 2 {
		t.Fatalf("the move: %v %s", err, out)
	}
	deep := s.storePath(filepath.Join(root, f[1], "bag", b, b, b, "big"))
	if err := syscall.Access(deep, 0); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("the moved file's store path (%d bytes) is not past PATH_MAX: %v", len(deep), err)
	}
	s.restart(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the mount after a restart", func() bool { return mountsAt(s.mnt("home")) == 1 })
	more, why := pyAs(t, uid1001, fillFile, filepath.Join(root, "more"), "65536", fmt.Sprint(quota))
	if total := int64(quota*3/4) + more; why != "EDQUOT" || total > quota {
		t.Fatalf("uid 1001 keeps %d bytes in its root/ after the restart (then %s), past its quota of %d", total, why, quota)
	}
}
