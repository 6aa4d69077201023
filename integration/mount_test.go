package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	os.Chmod(base, 0o777)
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
