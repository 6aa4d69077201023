package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// ResolveCwd resolves cwd (absolute, already checked by abi.CheckCwd)
// inside the chroot whose root directory the caller opened (root: the
// caller reached it without following any symlink), the way the kernel
// resolves openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV),
// and returns the path of the directory it names relative to the root
// ("." for the root itself), symlinks inside the chroot resolved as the
// kernel resolved them.
//
// forbidden lists host paths that must never be named: the chroot's own
// host path, the store, the mount root. A cwd that, as written, is one of
// them or lies below one is EACCES before anything is looked up, so that the
// answer does not depend on (or reveal) what exists there. The resolved host
// path is checked against them too, except against those that contain the
// root itself (every cwd resolves below those).
//
// A missing component is ENOENT, a non-directory ENOTDIR; anything that
// leaves the chroot or its mount (an absolute symlink — RESOLVE_BENEATH
// refuses those even when they would land inside —, a ".." symlink above
// the root, a magic link, another mount) is EACCES. ELOOP is EACCES too:
// the kernel reports a magic link and a symlink loop alike.
//
// A nil root is a chroot not made yet: only its root can be a cwd there
// (ENOENT for any other), so that a send refused for its cwd makes
// nothing.
func ResolveCwd(root *os.File, cwd string, forbidden []string) (string, error) {
	if err := abi.CheckCwd(cwd); err != nil {
		return "", err
	}
	clean := filepath.Clean(cwd)
	for _, f := range forbidden {
		if within(clean, filepath.Clean(f)) {
			return "", abi.Errorf(syscall.EACCES, "resolve cwd", "%s names a path the agent may not use", cwd)
		}
	}
	if clean == "/" {
		// The root itself: the walk below would open "." beneath the
		// root and read back the root's own path, at every send with the
		// default cwd (docs/benchmarks.md#send-path). Nothing it checks
		// can fail for ".".
		return ".", nil
	}
	if root == nil {
		return "", abi.Errorf(syscall.ENOENT, "resolve cwd", "%s does not exist in %s", cwd, cwdRoot) // nothing does yet
	}
	rootHost, err := fdPath(int(root.Fd()))
	if err != nil {
		return "", err
	}
	host, err := openBeneath(int(root.Fd()), clean)
	if err != nil {
		return "", err
	}
	for _, f := range forbidden {
		f = realPath(f)
		if !within(rootHost, f) && within(host, f) {
			return "", abi.Errorf(syscall.EACCES, "resolve cwd", "%s leads to a path the agent may not use", cwd)
		}
	}
	if host == rootHost {
		return ".", nil
	}
	if !strings.HasPrefix(host, rootHost+"/") {
		return "", abi.Errorf(syscall.EACCES, "resolve cwd", "%s resolved outside the chroot", cwd)
	}
	return host[len(rootHost)+1:], nil
}

// openBeneath opens cwd as a directory beneath rootFd and returns the host
// path the kernel reached, read back from /proc/self/fd so that symlinks
// inside the chroot are resolved as the kernel resolved them.
func openBeneath(rootFd int, cwd string) (string, error) {
	rel := strings.TrimPrefix(cwd, "/")
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := openat2Retry(rootFd, rel, how)
	if err != nil {
		return "", cwdErr(cwd, err)
	}
	defer unix.Close(fd)
	return fdPath(fd)
}

// fdPath is the host path of an open directory, as the kernel names it.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", abi.Wrap("resolve cwd", err)
	}
	return p, nil
}

// openat2Retry retries EAGAIN, which RESOLVE_BENEATH returns when a rename
// elsewhere raced with the lookup and the kernel could not prove safety.
func openat2Retry(dirfd int, rel string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err != unix.EAGAIN || i == 100 {
			return fd, err
		}
	}
}

// cwdRoot names, in refusals, where a cwd is resolved: the agent's root/
// directory, jailed or not (the chroot is only the jailed run's view of it).
const cwdRoot = "the agent's root/ (a cwd is a path inside it)"

// cwdErr maps what openat2 said to the errnos of SPEC section 8.
func cwdErr(cwd string, err error) error {
	errno, _ := err.(syscall.Errno)
	switch errno {
	case unix.ENOENT:
		return abi.Errorf(syscall.ENOENT, "resolve cwd", "%s does not exist in %s", cwd, cwdRoot)
	case unix.ENOTDIR:
		return abi.Errorf(syscall.ENOTDIR, "resolve cwd", "%s is not a directory in %s", cwd, cwdRoot)
	case unix.EXDEV, unix.ELOOP, unix.EACCES:
		return abi.Errorf(syscall.EACCES, "resolve cwd", "%s leaves %s or its mount (%s)", cwd, cwdRoot, abi.ErrnoName(errno))
	case 0:
		return abi.Errorf(syscall.EIO, "resolve cwd", "%s: %v", cwd, err)
	}
	return abi.Errorf(errno, "resolve cwd", "%s: %v", cwd, err)
}

// within reports whether p is dir or lies below it (both clean).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// realPath resolves symlinks in p when it can, so that a forbidden path
// given through a symlink still matches what the kernel reached. The
// forbidden paths are the server's store and mount root, fixed for its
// life: each is resolved once (resolving walked every component with an
// lstat at every send).
func realPath(p string) string {
	if r, ok := realPaths.Load(p); ok {
		return r.(string)
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return filepath.Clean(p) // not cached: it may appear later
	}
	realPaths.Store(p, r)
	return r
}

var realPaths sync.Map // path → its resolution
