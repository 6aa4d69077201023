package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// mountInNamespace runs `ctxfs mount --foreground` in a private mount
// namespace whose /dev is prepared by setup (a shell line; $1 is a
// scratch directory), as uid (0: root; others through setpriv), with PATH
// path. It returns the output and exit status, and checks that nothing
// was mounted or made: a refused mount never touches the store.
func mountInNamespace(t *testing.T, setup string, uid int, path string) (string, int) {
	t.Helper()
	requireFUSE(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	base := t.TempDir()
	openToAll(t, base)
	testkit.Must(t, os.Chmod(base, 0o755))
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	run := `exec env -i PATH="$4" HOME=/ "$2" mount --foreground --root "$3/ctx" --store "$3/store"`
	if uid != 0 {
		run = `exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH="$4" HOME=/ "$2" mount --foreground --root "$3/ctx" --store "$3/store"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-ec", setup+"\n"+run,
		"sh", t.TempDir(), ctxfsBin, base, path)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("a refused mount made the store (%v)", err)
	}
	if mountsAt(filepath.Join(root, "home"))+mountsAt(filepath.Join(root, "shared")) != 0 {
		t.Errorf("a refused mount mounted")
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// /dev/fuse as a private device node of mode 0600: what a user meets on a
// host that ships it so (this one does).
const privateDevFuse = `mknod "$1/fuse" c 10 229; chmod 600 "$1/fuse"; mount --bind "$1/fuse" /dev/fuse`

const devFuseFix = "/dev/fuse is crw------- root:root, which uid 65534 may not read and write (fusermount3 opens it as the user): " +
	`as root, chmod 0666 /dev/fuse (the mode most distributions ship; a udev rule KERNEL=="fuse", MODE="0666" keeps it), ` +
	"or chgrp fuse /dev/fuse && chmod 0660 /dev/fuse and add the user to the group fuse"

// A user who may not open /dev/fuse is told so, with the fix, before
// anything starts; without fusermount3 too, both are named.
func TestNonRootMountWithoutDevFuseAccess(t *testing.T) {
	out, code := mountInNamespace(t, privateDevFuse, 65534, "/usr/bin:/bin")
	want := "ctxfs: uid 65534 cannot mount FUSE: " + devFuseFix + "; or mount as root\n"
	if code != 1 || out != want {
		t.Errorf("exit %d, %q;\nwant exit 1, %q", code, out, want)
	}
	out, code = mountInNamespace(t, privateDevFuse, 65534, "/nonexistent")
	want = "ctxfs: uid 65534 cannot mount FUSE: fusermount3 not found in $PATH: install fuse3 (apt install fuse3, dnf install fuse3); " + devFuseFix + "; or mount as root\n"
	if code != 1 || out != want {
		t.Errorf("without fusermount3: exit %d, %q;\nwant exit 1, %q", code, out, want)
	}
}

// Without /dev/fuse at all (a container started without it), root is told
// how to get it.
func TestMountWithoutDevFuse(t *testing.T) {
	out, code := mountInNamespace(t, `mount -t tmpfs none /dev`, 0, "/usr/bin:/bin")
	want := "ctxfs: uid 0 cannot mount FUSE: /dev/fuse does not exist: load the FUSE module (modprobe fuse); " +
		"in a container, pass the device in (docker run --device /dev/fuse)\n"
	if code != 1 || out != want {
		t.Errorf("exit %d, %q;\nwant exit 1, %q", code, out, want)
	}
}
