package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// `ctxfs mount` without --foreground returns once both mounts answer, and
// `ctxfs umount` stops the server and leaves no mount behind.
func TestBackgroundMountAndUmount(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	t.Cleanup(func() {
		exec.Command(ctxfsBin, "umount", "--root", root).Run()
		for _, d := range []string{"home", "shared"} {
			exec.Command("umount", "-l", filepath.Join(root, d)).Run()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctxfsBin, "mount", "--root", root, "--store", store).CombinedOutput()
	if err != nil {
		t.Fatalf("ctxfs mount: %v\n%s", err, out)
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(filepath.Join(root, d)) == 0 {
			t.Fatalf("%s is not mounted when ctxfs mount returned", d)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "home", "0")); err != nil {
		t.Fatalf("own home through the fresh mount: %v", err)
	}
	out, err = exec.CommandContext(ctx, ctxfsBin, "umount", "--root", root).CombinedOutput()
	if err != nil {
		t.Fatalf("ctxfs umount: %v\n%s", err, out)
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(filepath.Join(root, d)) > 0 {
			t.Fatalf("%s still mounted after ctxfs umount", d)
		}
	}
}

// A user without fusermount3 is told what is missing.
func TestNonRootWithoutFusermount(t *testing.T) {
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, os.ModeSticky|0o777) // sticky, as /tmp: a root below it may be made by anyone
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctxfsBin, "mount", "--foreground", "--root", filepath.Join(base, "ctx"), "--store", filepath.Join(base, "store"))
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + base}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fusermount3") {
		t.Fatalf("non-root mount without fusermount3: %v\n%s", err, out)
	}
}

// `ctxfs space add` never writes to a store nobody serves at the root it
// was given, and refuses to be told two places at once.
func TestSpaceAddRefusals(t *testing.T) {
	base := t.TempDir()
	out, err := exec.Command(ctxfsBin, "space", "add", "team", "--root", filepath.Join(base, "ctx")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no ctxfs serves") {
		t.Fatalf("space add at an unserved root: %v\n%s", err, out)
	}
	cmd := exec.Command(ctxfsBin, "space", "add", "team", "--root", base, "--store", filepath.Join(base, "store"))
	out, err = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "not both") {
		t.Fatalf("space add with --root and --store: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(base, "store")); !os.IsNotExist(err) {
		t.Fatalf("a refused space add made a store: %v", err)
	}
}

// A store that another uid could change behind the server is refused,
// with the fix named, and nothing is mounted.
func TestMountRefusesAnUnsafeStore(t *testing.T) {
	base := t.TempDir()
	os.Chmod(base, 0o777) // anyone may replace the store below it
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctxfsBin, "mount", "--foreground", "--root", root, "--store", store).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "writable by every user") || !strings.Contains(string(out), "chmod go-w") {
		t.Fatalf("mount of an unsafe store: %v\n%s", err, out)
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(filepath.Join(root, d)) > 0 {
			t.Fatalf("%s is mounted after a refused mount", d)
		}
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Fatalf("a refused mount made the store: %v", err)
	}
	// An existing store with a wide mode is made 0700 at mount.
	os.Chmod(base, 0o755)
	testkit.Must(t, os.MkdirAll(store, 0o755))
	testkit.Must(t, os.Chmod(store, 0o755))
	s := &server{t: t, root: root, store: store}
	s.define("coder", map[string]string{"model": "debug/echo"})
	s.start()
	st, err := os.Stat(store)
	testkit.Must(t, err)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("store mode %v after mount, want 0700", st.Mode())
	}
}

// As root the mounts read ahead as far as one READ carries (1 MiB,
// fs/mount.go readaheadKB), not the kernel's 128 KiB: a large log read
// cold through the mount costs an eighth of the round trips.
func TestMountReadahead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root may set a mount's readahead")
	}
	s := newFuseServer(t)
	for _, top := range []string{"home", "shared"} {
		var st unix.Stat_t
		testkit.Must(t, unix.Stat(s.mnt(top), &st))
		ra := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
		// The server sets it just after its mount answers.
		eventually(t, 10*time.Second, top+" readahead 1024 KiB", func() bool {
			b, err := os.ReadFile(ra)
			return err == nil && strings.TrimSpace(string(b)) == "1024"
		})
	}
}
