package fs

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// An ABI path's inode number is the same for the server's life and has
// the top bit set (clear of the store's numbers), and it cannot be
// computed from the path: another server process (here the test binary
// run again) numbers the same path otherwise. A number anyone could
// compute let a user search out a name of theirs sharing another user's
// file's number, which go-fuse then served as that file (inoOf).
func TestInodeNumbersAreKeyed(t *testing.T) {
	const rel = "home/1001/agent/coder/session/p/messages.jsonl"
	if os.Getenv("CTXFS_TEST_PRINT_INO") != "" {
		fmt.Printf("ino=%d\n", inoOf(rel))
		return
	}
	ino := inoOf(rel)
	if ino != inoOf(rel) || ino&(1<<63) == 0 || ino == inoOf(rel+"x") {
		t.Fatalf("inoOf(%q) = %#x: not stable, not above the store's numbers, or the same as another path's", rel, ino)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInodeNumbersAreKeyed$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CTXFS_TEST_PRINT_INO=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the test binary again: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`ino=(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no number from the other process: %s", out)
	}
	if string(m[1]) == fmt.Sprint(ino) {
		t.Fatalf("another server process gives %s the same number %s: it can be computed from the path", rel, m[1])
	}
}
