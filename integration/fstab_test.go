package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// helperPath is where mount(8) looks for the helper of fuse.ctxfs (before
// the generic mount.fuse, which knows no ctxfs).
const helperPath = "/sbin/mount.fuse.ctxfs"

// installHelper makes helperPath the ctxfs under test, as `make install`
// does (a symlink), and removes it at the end. A helper that is already
// there (a real install) is left alone: the test is skipped.
func installHelper(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	if why := provideMountHelper(t); why != "" {
		t.Skip(why)
	}
}

// mount8 runs mount(8) with a deadline and returns its output and status.
func mount8(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mount", args...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// An /etc/fstab line works: mount(8) runs the helper, which starts the
// server and returns once both mounts answer; the options of the line go
// to the server (its log level here); `ctxfs umount` unmounts. The line is
// read from a file of the test's own (mount --fstab), /etc/fstab is not
// touched.
func TestFstabLineMounts(t *testing.T) {
	installHelper(t)
	s := unstartedServer(t)
	fstab := filepath.Join(filepath.Dir(s.root), "fstab")
	line := s.store + " " + s.root + " fuse.ctxfs rw,noauto,nofail,_netdev,x-systemd.requires=local-fs.target,gc-idle=30m,log-level=debug 0 0\n"
	testkit.Must(t, os.WriteFile(fstab, []byte(line), 0o644))

	out, code := mount8(t, "--fstab", fstab, s.root)
	if code != 0 || out != "" {
		t.Fatalf("mount %s: exit %d, %q", s.root, code, out)
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(s.mnt(d)) != 1 {
			t.Fatalf("%s is not mounted when mount(8) returned", d)
		}
	}
	run := runID(t, s.send("fstab", "c1", "hello"))
	s.mustRequest("coder", `{"op":"bogus"}`) // refused: logged at the line's log-level=debug
	if _, err := os.Stat(s.mnt(sessRel("fstab") + "/messages.jsonl")); err != nil {
		t.Errorf("the session through the mount: %v", err)
	}
	out, code = ctxfsCmd(t, "umount", "--root", s.root)
	if code != 0 {
		t.Fatalf("ctxfs umount: exit %d, %q", code, out)
	}
	for _, d := range []string{"home", "shared"} {
		if mountsAt(s.mnt(d)) != 0 {
			t.Errorf("%s still mounted after ctxfs umount", d)
		}
	}
	log := fileBytes(t, filepath.Join(s.store, "ctxfs.log"))
	wantLinesInOrder(t, log, []string{
		`level=INFO msg="run start" run=` + run + ` `,
		`level=DEBUG msg=refused errno=EINVAL op="" agent=coder `,
		`level=INFO msg=stopped `,
	})
}

// `mount -t fuse.ctxfs STORE ROOT` works without an fstab line; a refused
// option is mount(8)'s usage status 1 with the reason, and nothing is
// mounted or made.
func TestMountTypeFuseCtxfs(t *testing.T) {
	installHelper(t)
	s := unstartedServer(t) // its root exists, as mount(8) wants
	root, store := s.root, s.store

	out, code := mount8(t, "-t", "fuse.ctxfs", store, root, "-o", "ro")
	if code != 1 || !strings.Contains(out, "ctxfs: -o ro: ctxfs has no read-only mode") {
		t.Fatalf("mount -o ro: exit %d, %q", code, out)
	}
	out, code = mount8(t, "-t", "fuse.ctxfs", store, root, "-o", "uid=1000")
	if code != 1 || !strings.Contains(out, "ctxfs: -o uid=1000: not an option of ctxfs") {
		t.Fatalf("mount -o uid=1000: exit %d, %q", code, out)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) || mountsAt(filepath.Join(root, "home")) != 0 {
		t.Fatalf("a refused mount made the store (%v) or mounted", err)
	}

	out, code = mount8(t, "-t", "fuse.ctxfs", store, root)
	if code != 0 || out != "" {
		t.Fatalf("mount -t fuse.ctxfs: exit %d, %q", code, out)
	}
	for _, d := range []string{"home", "shared"} {
		if _, err := os.Stat(filepath.Join(root, d, "0")); d == "home" && err != nil {
			t.Errorf("own home through the fresh mount: %v", err)
		}
		if mountsAt(filepath.Join(root, d)) != 1 {
			t.Errorf("%s is not mounted", d)
		}
	}
	if out, code := ctxfsCmd(t, "umount", "--root", root); code != 0 {
		t.Fatalf("ctxfs umount: exit %d, %q", code, out)
	}
	if mountsAt(filepath.Join(root, "home"))+mountsAt(filepath.Join(root, "shared")) != 0 {
		t.Errorf("still mounted after ctxfs umount")
	}
}
