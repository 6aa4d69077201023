package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestJailSetUpRightAfterStart: the jail tests' set-up (mkdir -p of uid
// 1000's root/bin through the mount, then busybox and its links created
// there) right after the server starts lands in the store, server after
// server. It used to fail with ENOENT in 1 to 9 starts of 100: the server
// answers its sockets before its mounts are up, and the set-up ran as
// soon as the socket answered, so the mkdir -p could go to the bare
// mountpoint (hidden once the mount came up) and the next create through
// the mount found no bin/. A set-up made wholly before the mount came up
// did not fail there but left the jail without busybox: the store check
// catches it.
func TestJailSetUpRightAfterStart(t *testing.T) {
	want, err := os.ReadFile(busybox)
	if err != nil {
		t.Skipf("%s: %v", busybox, err)
	}
	for i := 0; i < 8; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s := newJailServer(t, "#!/bin/sh\necho ran\n", true)
			got, err := os.ReadFile(filepath.Join(s.store, "home/1000/agent/jailed/root/bin/busybox"))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("busybox is not in the store after the set-up: %v", err)
			}
		})
	}
}

// TestFreeTreeMkdirAllThenCreate: in a free tree, creating a file right
// after mkdir -p of the directories leading to it works every time, with
// four writers at once and the trees of earlier rounds removed as they
// go (store inode numbers are reused, and free-tree nodes are numbered by
// them). Each writer stops at its first error, which is reported with
// its path; the whole runs for about two seconds.
func TestFreeTreeMkdirAllThenCreate(t *testing.T) {
	s := newFuseServer(t)
	root := s.mnt(coderRel + "/root")
	testkit.Must(t, os.MkdirAll(root, 0o755))
	deadline := time.Now().Add(2 * time.Second)
	const writers = 4
	errs := make(chan error, writers)
	rounds := make(chan int, writers)
	for w := 0; w < writers; w++ {
		go func(w int) {
			n, err := mkdirAllThenCreate(filepath.Join(root, fmt.Sprint("w", w)), deadline)
			rounds <- n
			errs <- err
		}(w)
	}
	total := 0
	for w := 0; w < writers; w++ {
		total += <-rounds
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if total < writers {
		t.Errorf("only %d rounds in all", total)
	}
	t.Logf("%d rounds", total)
}

// mkdirAllThenCreate makes dir/<round>/a/b/c and the file f in it, round
// after round until deadline, and removes each round's tree in the next
// round. It returns how many rounds it made and its first error.
func mkdirAllThenCreate(dir string, deadline time.Time) (int, error) {
	n := 0
	for ; time.Now().Before(deadline); n++ {
		leaf := filepath.Join(dir, fmt.Sprint(n), "a/b/c")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return n, fmt.Errorf("round %d: mkdir -p: %w", n, err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "f"), []byte("x"), 0o644); err != nil {
			return n, fmt.Errorf("round %d: create right after mkdir -p: %w", n, err)
		}
		if n > 0 {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprint(n-1))); err != nil {
				return n, fmt.Errorf("round %d: rm -r of the round before: %w", n, err)
			}
		}
	}
	return n, nil
}
