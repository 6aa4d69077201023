package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// chrootTree builds a chroot root with the cases of SPEC section 8 step 6.
func chrootTree(t *testing.T) (rootDir, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rootDir = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{"root/work/sub", "root/secret/inner", "root/mnt", "outside"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WriteFile(t, filepath.Join(rootDir, "work", "file"), "x", 0o644)
	links := map[string]string{
		"rel":     "work/sub",        // stays inside: fine
		"dotdot":  "../outside",      // leaves the root
		"abs":     "/work",           // absolute: RESOLVE_BENEATH refuses it
		"magic":   "/proc/self/root", // a magic link behind an absolute one
		"up/link": "../../outside",
	}
	for name, target := range links {
		p := filepath.Join(rootDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return rootDir, outside
}

// resolveHost is ResolveCwd on the directory rootDir, as a host path.
func resolveHost(t *testing.T, rootDir, cwd string, forbidden []string) (string, error) {
	t.Helper()
	root, err := os.Open(rootDir)
	if err != nil {
		return "", abi.Wrap("open", err)
	}
	defer root.Close()
	rel, err := ResolveCwd(root, cwd, forbidden)
	if err != nil {
		return "", err
	}
	real, _ := filepath.EvalSymlinks(rootDir)
	return filepath.Join(real, rel), nil
}

func TestResolveCwd(t *testing.T) {
	rootDir, _ := chrootTree(t)
	secret := filepath.Join(rootDir, "secret") // a forbidden host path inside the tree
	forbidden := []string{rootDir, "/ctx", secret}
	cases := []struct {
		cwd  string
		host string // "" when an error is expected
		want syscall.Errno
	}{
		{"/", rootDir, 0},
		{"/work", filepath.Join(rootDir, "work"), 0},
		{"/work/./sub/", filepath.Join(rootDir, "work", "sub"), 0},
		{"/rel", filepath.Join(rootDir, "work", "sub"), 0},
		{"/missing", "", syscall.ENOENT},
		{"/work/missing/deeper", "", syscall.ENOENT},
		{"/work/file", "", syscall.ENOTDIR},
		{"/work/file/x", "", syscall.ENOTDIR},
		{"/dotdot", "", syscall.EACCES},
		{"/up/link", "", syscall.EACCES},
		{"/abs", "", syscall.EACCES},
		{"/magic", "", syscall.EACCES},
		{"/secret/inner", "", syscall.EACCES},          // host path check
		{rootDir, "", syscall.EACCES},                  // names the chroot's own host path
		{"/ctx/home/0", "", syscall.EACCES},            // names the mount root, even though missing
		{"relative", "", syscall.EINVAL},               // not checked by the caller after all
		{"/work/../..", "", syscall.EINVAL},            // idem
		{"/ctxfoo", "", syscall.ENOENT},                // a mere prefix of /ctx is not below it
		{"/work/sub/../../secret", "", syscall.EINVAL}, // .. is refused as written
	}
	for _, c := range cases {
		host, err := resolveHost(t, rootDir, c.cwd, forbidden)
		if c.want != 0 {
			testkit.WantErrno(t, c.cwd, err, c.want)
			continue
		}
		if err != nil || host != c.host {
			t.Errorf("ResolveCwd(%q) = %q, %v; want %q", c.cwd, host, err, c.host)
		}
	}
}

func TestResolveCwdMagicLink(t *testing.T) {
	// A symlink to /proc/self/root is refused already as an absolute link
	// (see TestResolveCwd). To hit RESOLVE_NO_MAGICLINKS itself, resolve
	// beneath /proc/self: "root" and "cwd" there are magic links that
	// neither leave the directory nor cross a mount by name.
	for _, cwd := range []string{"/root", "/cwd"} {
		_, err := resolveHost(t, "/proc/self", cwd, nil)
		testkit.WantErrno(t, "/proc/self"+cwd, err, syscall.EACCES)
	}
	if _, err := resolveHost(t, "/proc/self", "/fd", nil); err != nil {
		t.Errorf("/proc/self/fd, a plain directory: %v", err)
	}
}

func TestResolveCwdMount(t *testing.T) {
	rootDir, outside := chrootTree(t)
	mnt := filepath.Join(rootDir, "mnt")
	if err := unix.Mount(outside, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	if err := os.Mkdir(filepath.Join(outside, "below"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{"/mnt", "/mnt/below"} {
		_, err := resolveHost(t, rootDir, cwd, nil)
		testkit.WantErrno(t, cwd, err, syscall.EACCES)
	}
}

func TestResolveCwdMissingRoot(t *testing.T) {
	_, err := resolveHost(t, filepath.Join(t.TempDir(), "none"), "/", nil)
	testkit.WantErrno(t, "missing root", err, syscall.ENOENT)
}
