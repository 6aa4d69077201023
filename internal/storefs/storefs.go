// Package storefs is the one door through which the server touches its
// store. Every open, create, mkdir, rename, chmod, chown, utimes, stat,
// readdir and unlink that session, sealedlog, index and fs make on the
// store goes through a Root, and nothing else in the server opens a store
// path.
//
// Why this is safe, in one place: a Root holds a descriptor of the store
// directory, and every path it is given is relative to it. A path is walked
// by the kernel with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS), so a symlink in any component, a ".." that would
// climb out, or a magic link fails the walk instead of being followed. The
// last component is then acted on with an *at call on the parent's
// descriptor and a plain name, with AT_SYMLINK_NOFOLLOW where the call
// takes it (fchownat, utimensat, fstatat, fchmodat2), or with calls that
// never follow a last symlink anyway (mkdirat, unlinkat, renameat2,
// symlinkat, linkat without AT_SYMLINK_FOLLOW, mknodat, readlinkat).
// Files are opened first as O_PATH (which opens nothing: no FIFO blocks, no
// device runs its open), their type checked with fstat, and only then
// reopened for reading or writing through their own descriptor; creation
// is O_CREAT|O_EXCL, which never opens what is already there. Something of
// the wrong type where the store expects a regular file or a directory is
// an *UnsafeError (EIO): the store holds what it did not make, and the
// server refuses to use it rather than guess.
//
// Before any of that, the store's own path, and the mount root's, are
// held to one rule (secure.go, rootdir.go): walked from "/" with
// O_NOFOLLOW at every step, and changeable by no one but root and the
// server's uid; the definitions' loader and ctx doctor apply the same
// rule (OtherWriter, AnyOtherWriter).
//
// The free trees (an agent's root/, a session's context/) hold user
// symlinks by design. Through this package the server lists, stats, reads
// and removes those links as links; it never walks through one. A Root
// made by As does a user's changes there with the user's own filesystem
// identity (cred.go); it is for the free trees only, never for history.
package storefs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// resolve is how every path below a Root is walked.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Root is an open store directory.
type Root struct {
	fd    int    // O_PATH|O_DIRECTORY descriptor of the store
	path  string // the store's host path, as opened
	shown string // what paths in errors start with: the mount root, or the store path
	as    *Cred  // whose identity acts on the last name (nil: the server's); see As
	close *sync.Once
	ways  *ways // what the store's filesystem gives, probed once (ways.go)
	gate  *gate // whether this host may still change the store (gate.go)
}

// Open opens the store directory at path (an administrator's path: it is
// resolved as given, symlinks and all) and keeps a descriptor of it. Paths
// in errors are shown below path until ShowAs says otherwise.
func Open(path string) (*Root, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open store", Path: path, Err: err}
	}
	return &Root{fd: fd, path: path, shown: path, close: new(sync.Once), ways: new(ways), gate: new(gate)}, nil
}

// ShowAs returns a Root on the same descriptor whose errors name paths
// below prefix: the engine shows clients paths under the mount root, never
// the store's host path.
func (r *Root) ShowAs(prefix string) *Root {
	c := *r
	c.shown = prefix
	return &c
}

// Close closes the store descriptor, shared by every ShowAs copy, once: a
// second close must never close a descriptor reused by someone else.
func (r *Root) Close() error {
	var err error
	r.close.Do(func() { err = unix.Close(r.fd) })
	return err
}

// Path is the store's host path.
func (r *Root) Path() string { return r.path }

// Show is how rel is named in messages.
func (r *Root) Show(rel string) string {
	if rel == "" || rel == "." {
		return r.shown
	}
	return r.shown + "/" + rel
}

// UnsafeError says that the store holds, where it expects a regular file
// or a directory, something it did not make: a symlink in the path or at
// its end, a FIFO, a socket, a device, or the wrong one of file and
// directory. It is EIO for every caller: the server neither follows nor
// uses it, and fsck names it.
type UnsafeError struct {
	Op   string
	Path string // as shown
	What string // "a symlink is in the path", "a FIFO, not a regular file", …
	Link bool   // what was met is a symlink (the kernel said ELOOP)
}

func (e *UnsafeError) Error() string { return e.Op + " " + e.Path + ": " + e.What }

// Unwrap makes errors.Is(err, syscall.EIO) and abi.Errno(err) see EIO.
func (e *UnsafeError) Unwrap() error { return syscall.EIO }

// Words is an error's own words, without the path that an *fs.PathError
// or an *UnsafeError adds (for callers that name the path themselves).
func Words(err error) string {
	var pe *fs.PathError
	var ue *UnsafeError
	switch {
	case errors.As(err, &ue):
		return ue.What
	case errors.As(err, &pe):
		return pe.Err.Error()
	}
	return err.Error()
}

// IsUnsafe reports whether err is (or wraps) an *UnsafeError.
func IsUnsafe(err error) bool {
	var u *UnsafeError
	return errors.As(err, &u)
}

// fail wraps an errno from a call on rel. ELOOP from a walk with
// RESOLVE_NO_SYMLINKS means a symlink was met, and EXDEV from
// RESOLVE_BENEATH that the path tried to leave the store: both are the
// store holding what it did not make.
func (r *Root) fail(op, rel string, err error) error {
	switch err {
	case nil:
		return nil
	case unix.ELOOP:
		return &UnsafeError{Op: op, Path: r.Show(rel), What: "a symlink is in the path", Link: true}
	case unix.EXDEV:
		return &UnsafeError{Op: op, Path: r.Show(rel), What: "the path leaves the store"}
	}
	return &fs.PathError{Op: op, Path: r.Show(rel), Err: err}
}

// clean checks that rel is a relative path with no "." or ".." component
// and no empty one, and returns it ("." for the store itself). A bad path
// is a bug in the caller, never something to walk.
func clean(rel string) (string, error) {
	if rel == "" || rel == "." {
		return ".", nil
	}
	if strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", unix.EINVAL
	}
	return rel, nil
}

// split is rel's parent and last name; the parent of a top-level name is ".".
func split(rel string) (dir, name string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// openat2 walks rel below the store. RESOLVE_BENEATH answers EAGAIN when a
// concurrent rename elsewhere kept the kernel from proving the walk safe;
// that is retried.
func (r *Root) openat2(rel string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Mode: uint64(mode), Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(r.fd, rel, how)
		if err != unix.EAGAIN || i == 64 {
			return fd, err
		}
	}
}

// parent opens rel's parent directory (O_PATH) and returns it with the
// last name. The store itself is its own descriptor; done closes what was
// opened.
func (r *Root) parent(op, rel string) (dirfd int, name string, done func(), err error) {
	rel, err = clean(rel)
	if err != nil {
		return -1, "", nil, r.fail(op, rel, err)
	}
	if rel == "." {
		return -1, "", nil, r.fail(op, rel, unix.EINVAL) // the store has no parent here
	}
	dir, name := split(rel)
	if dir == "." {
		return r.fd, name, func() {}, nil
	}
	fd, err := r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if err == unix.ENOTDIR {
			return -1, "", nil, &UnsafeError{Op: op, Path: r.Show(dir), What: "not a directory"}
		}
		return -1, "", nil, r.fail(op, dir, err)
	}
	return fd, name, func() { unix.Close(fd) }, nil
}

// Lstat describes what is at rel without following it.
func (r *Root) Lstat(rel string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if rel == "" || rel == "." {
		return &st, r.fail("stat", rel, unix.Fstat(r.fd, &st))
	}
	dirfd, name, done, err := r.parent("stat", rel)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, r.fail("stat", rel, err)
	}
	return &st, nil
}

// Kind of file an operation expects.
type Kind uint8

const (
	Regular   Kind = iota + 1 // a regular file
	Directory                 // a directory
)

// check returns an *UnsafeError unless st is of kind k.
func (r *Root) check(op, rel string, st *unix.Stat_t, k Kind) error {
	typ := st.Mode & unix.S_IFMT
	switch {
	case k == Regular && typ == unix.S_IFREG, k == Directory && typ == unix.S_IFDIR:
		return nil
	}
	want := "a regular file"
	if k == Directory {
		want = "a directory"
	}
	return &UnsafeError{Op: op, Path: r.Show(rel), What: TypeName(st.Mode) + ", not " + want, Link: st.Mode&unix.S_IFMT == unix.S_IFLNK}
}

// TypeName names the type of a mode: "a symlink", "a FIFO", …
func TypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "a file of unknown type"
}

// OpenFile opens the regular file at rel with flags (O_RDONLY, O_WRONLY or
// O_RDWR, with O_APPEND, O_TRUNC, O_CREAT, O_EXCL). The file is created
// with perm when O_CREAT is given and nothing is there; perm is then
// applied exactly (the umask does not narrow it). Anything but a regular
// file at rel is an *UnsafeError.
func (r *Root) OpenFile(rel string, flags int, perm os.FileMode) (*os.File, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, r.fail("open", rel, err)
	}
	if writes(flags) {
		if err := r.gated("open", rel); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		if flags&unix.O_CREAT == 0 || flags&unix.O_EXCL == 0 {
			f, err := r.reopen(rel, flags)
			if err == nil || flags&unix.O_CREAT == 0 || !errors.Is(err, fs.ErrNotExist) || attempt > 0 {
				return f, err
			}
		}
		f, err := r.create(rel, flags, perm)
		if flags&unix.O_EXCL != 0 || !errors.Is(err, fs.ErrExist) || attempt > 0 {
			return f, err
		}
		// Created by someone else between our two looks: open that.
	}
}

// reopen opens an existing regular file: O_PATH first (it opens nothing),
// the type checked, then a real open of that very inode through its
// descriptor.
func (r *Root) reopen(rel string, flags int) (*os.File, error) {
	pfd, err := r.openat2(rel, unix.O_PATH, 0)
	if err != nil {
		return nil, r.fail("open", rel, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, r.fail("open", rel, err)
	}
	if err := r.check("open", rel, &st, Regular); err != nil {
		return nil, err
	}
	// O_NOFOLLOW is dropped: the magic link below is a symlink by type,
	// and following it is the point (ELOOP otherwise, for every open with
	// O_NOFOLLOW of an existing file: SQLite's). Nothing else is followed:
	// openat2 resolved rel without symlinks, and its inode is a regular file.
	flags &^= unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW
	fd := -1
	err = r.do(func() (err error) {
		fd, err = unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		return err
	})
	if err != nil {
		return nil, r.fail("open", rel, err)
	}
	return os.NewFile(uintptr(fd), r.Show(rel)), nil
}

// create makes a new regular file with O_CREAT|O_EXCL, which never opens
// anything already there (not even a symlink's target). The server walks
// and creates in one openat2; a user's identity (As) cannot walk the
// store's directories, so for a user the parent is walked first and the
// file created in it as the user.
func (r *Root) create(rel string, flags int, perm os.FileMode) (*os.File, error) {
	flags |= unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY
	var fd int
	var err error
	if r.as == nil {
		fd, err = r.openat2(rel, flags, uint32(perm.Perm()))
		err = r.fail("create", rel, err)
	} else {
		fd, err = r.createAs(rel, flags, perm)
	}
	if err != nil {
		return nil, err
	}
	// The umask narrowed the mode; set it exactly (as the creator).
	if err := r.do(func() error { return unix.Fchmod(fd, uint32(perm.Perm())) }); err != nil {
		unix.Close(fd)
		return nil, r.fail("create", rel, err)
	}
	return os.NewFile(uintptr(fd), r.Show(rel)), nil
}

// createAs is create's open for a Root with a user's identity.
func (r *Root) createAs(rel string, flags int, perm os.FileMode) (int, error) {
	dirfd, name, done, err := r.parent("create", rel)
	if err != nil {
		return -1, err
	}
	defer done()
	fd := -1
	err = r.do(func() (err error) {
		fd, err = unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	return fd, r.fail("create", rel, err)
}

// ReadFile reads the regular file at rel; more than limit bytes is EFBIG
// (a store file the server reads whole always has a known bound).
func (r *Root) ReadFile(rel string, limit int64) ([]byte, error) {
	return r.readFile(rel, limit, nil)
}

// ReadFileStat is ReadFile that also says which file it read: its fstat,
// taken before the read (a change after it moves the times a later stat
// sees), for a caller that keeps what it read while the file stays.
func (r *Root) ReadFileStat(rel string, limit int64) ([]byte, *unix.Stat_t, error) {
	var st unix.Stat_t
	b, err := r.readFile(rel, limit, &st)
	if err != nil {
		return nil, nil, err
	}
	return b, &st, nil
}

func (r *Root) readFile(rel string, limit int64, st *unix.Stat_t) ([]byte, error) {
	f, err := r.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st != nil {
		if err := unix.Fstat(int(f.Fd()), st); err != nil {
			return nil, r.fail("stat", rel, err)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, r.fail("read", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, r.fail("read", rel, unix.EFBIG)
	}
	return b, nil
}

// OpenDir opens the directory at rel for reading its entries or for
// fsync. Anything else there is an *UnsafeError.
func (r *Root) OpenDir(rel string) (*os.File, error) {
	return r.openDir(rel, unix.O_RDONLY)
}

// OpenDirPath opens the directory at rel as a place to walk from or go
// into (O_PATH): a dirfd for openat2, a path read back from /proc, a
// directory to fchdir into or clone as a tree (open_tree), never one to
// read entries from. The filesystem is not asked to open it: on a
// distributed or FUSE store that spares the OPENDIR and RELEASEDIR round
// trips of OpenDir. Anything else there is an *UnsafeError.
func (r *Root) OpenDirPath(rel string) (*os.File, error) {
	return r.openDir(rel, unix.O_PATH)
}

func (r *Root) openDir(rel string, flags int) (*os.File, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, r.fail("open", rel, err)
	}
	fd, err := r.openat2(rel, flags|unix.O_DIRECTORY, 0)
	if err == unix.ENOTDIR {
		return nil, &UnsafeError{Op: "open", Path: r.Show(rel), What: "not a directory"}
	}
	if err != nil {
		return nil, r.fail("open", rel, err)
	}
	return os.NewFile(uintptr(fd), r.Show(rel)), nil
}

// Mkdir makes the directory rel with exactly perm (and setgid or sticky
// when asked).
func (r *Root) Mkdir(rel string, perm os.FileMode) error {
	return r.mkdir(rel, perm, Owner{Uid: -1, Gid: -1})
}

// mkdir is Mkdir, the directory born own's when the Root acts as the
// server (bornAs; -1 keeps the server's id).
func (r *Root) mkdir(rel string, perm os.FileMode, own Owner) error {
	if r.as != nil {
		own = Owner{Uid: -1, Gid: -1} // made as the Root's user already
	}
	return r.at("mkdir", rel, func(dirfd int, name string) error {
		if err := bornAs(own, func() error { return unix.Mkdirat(dirfd, name, uint32(perm.Perm())) }); err != nil {
			return err
		}
		mode := uint32(perm.Perm())
		if perm&os.ModeSticky != 0 {
			mode |= unix.S_ISVTX
		}
		var st unix.Stat_t
		if perm&os.ModeSetgid != 0 || unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_ISGID != 0 {
			mode |= unix.S_ISGID // asked for, or inherited from a setgid parent
		}
		// mkdirat is narrowed by the umask; set the mode exactly.
		return chmodAt(dirfd, name, mode)
	})
}

// Remove unlinks the file (or symlink, or other non-directory) at rel.
func (r *Root) Remove(rel string) error {
	return r.at("remove", rel, func(dirfd int, name string) error { return unix.Unlinkat(dirfd, name, 0) })
}

// RemoveDir removes the empty directory at rel.
func (r *Root) RemoveDir(rel string) error {
	return r.at("rmdir", rel, func(dirfd int, name string) error { return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) })
}

// Rename renames oldRel to newRel with renameat2 flags (RENAME_NOREPLACE,
// RENAME_EXCHANGE or 0), as the filesystem does them: for a user's rename
// in a free tree, where a flag the store's filesystem lacks is its EINVAL.
// The store's own moves are Move and Swap (move.go). Neither name is
// followed.
func (r *Root) Rename(oldRel, newRel string, flags uint) error {
	return r.between("rename", oldRel, newRel, func(odir int, oname string, ndir int, nname string) error {
		return unix.Renameat2(odir, oname, ndir, nname, flags)
	})
}

// at runs an *at call on rel's last name in its parent (rel itself is
// never followed), past the gate, with the Root's credentials; its error
// is the store's (fail).
func (r *Root) at(op, rel string, call func(dirfd int, name string) error) error {
	if err := r.gated(op, rel); err != nil {
		return err
	}
	dirfd, name, done, err := r.parent(op, rel)
	if err != nil {
		return err
	}
	defer done()
	return r.fail(op, rel, r.do(func() error { return call(dirfd, name) }))
}

// between runs an *at call that takes two names, each in its parent.
func (r *Root) between(op, oldRel, newRel string, call func(odir int, oname string, ndir int, nname string) error) error {
	if err := r.gated(op, newRel); err != nil {
		return err
	}
	odir, oname, odone, err := r.parent(op, oldRel)
	if err != nil {
		return err
	}
	defer odone()
	ndir, nname, ndone, err := r.parent(op, newRel)
	if err != nil {
		return err
	}
	defer ndone()
	return r.fail(op, newRel, r.do(func() error { return call(odir, oname, ndir, nname) }))
}

// Chown changes the owner of rel itself (a symlink stays a symlink); -1
// leaves an id as it is.
func (r *Root) Chown(rel string, uid, gid int) error {
	if rel == "" || rel == "." {
		if err := r.gated("chown", rel); err != nil {
			return err
		}
		return r.fail("chown", rel, unix.Fchownat(r.fd, "", uid, gid, unix.AT_EMPTY_PATH))
	}
	return r.setAttr("chown", rel, func(dirfd int, name string) error {
		return unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}, func(fd int) error { return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH) })
}

// Chmod sets the mode bits (with setuid, setgid, sticky) of rel itself. A
// symlink's mode cannot be changed (EOPNOTSUPP); its target is never
// touched.
func (r *Root) Chmod(rel string, mode uint32) error {
	if rel == "" || rel == "." {
		if err := r.gated("chmod", rel); err != nil {
			return err
		}
		return r.fail("chmod", rel, chmodPath(r.fd, mode))
	}
	return r.setAttr("chmod", rel, func(dirfd int, name string) error { return chmodAt(dirfd, name, mode) },
		func(fd int) error { return chmodPath(fd, mode) })
}

// chmodAt changes the mode of name in dirfd, never of a symlink's target.
func chmodAt(dirfd int, name string, mode uint32) error {
	err := unix.Fchmodat(dirfd, name, mode&07777, unix.AT_SYMLINK_NOFOLLOW) // fchmodat2
	if err != unix.EOPNOTSUPP {
		return err
	}
	// No fchmodat2 (kernels before 6.6), or name is a symlink: take the
	// inode by an O_PATH descriptor and change that, unless it is a link.
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return chmodPath(fd, mode)
}

// chmodPath changes the mode of the inode an O_PATH descriptor holds.
func chmodPath(fd int, mode uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.EOPNOTSUPP
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode&07777)
}

// Utimes sets the access and modification times of rel itself
// (unix.UTIME_OMIT leaves one as it is).
func (r *Root) Utimes(rel string, ts [2]unix.Timespec) error {
	return r.setAttr("utimes", rel, func(dirfd int, name string) error {
		return unix.UtimesNanoAt(dirfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW)
	}, func(fd int) error {
		return unix.UtimesNanoAt(fd, "", ts[:], unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	})
}

// setAttr changes the mode, owner or times of rel itself. As the server,
// by name in rel's parent (byName). As a user (As), byFd on an O_PATH
// descriptor of rel the server opens in its parent: the kernel judges
// such a change by the inode (its owner, the caller's capabilities), but
// a change by name also needs the right to search the parent, and the
// parent of a free tree's top (an agent's root/, a session's context/) is
// a store directory closed to users, so that the owner's chmod or touch
// of root/ itself was EACCES (cp -a and tar -x into it failed).
func (r *Root) setAttr(op, rel string, byName func(dirfd int, name string) error, byFd func(fd int) error) error {
	if r.as == nil {
		return r.at(op, rel, byName)
	}
	return r.As(Cred{}).at(op, rel, func(dirfd int, name string) error {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return r.do(func() error { return byFd(fd) })
	})
}

// Symlink makes rel a symlink to target (the target is only stored).
func (r *Root) Symlink(target, rel string) error {
	return r.at("symlink", rel, func(dirfd int, name string) error { return unix.Symlinkat(target, dirfd, name) })
}

// Link makes newRel a hard link to oldRel itself (a symlink is linked as
// a symlink, never followed).
func (r *Root) Link(oldRel, newRel string) error {
	return r.between("link", oldRel, newRel, func(odir int, oname string, ndir int, nname string) error {
		return unix.Linkat(odir, oname, ndir, nname, 0)
	})
}

// Mknod makes a FIFO, socket or device node at rel.
func (r *Root) Mknod(rel string, mode uint32, dev int) error {
	return r.at("mknod", rel, func(dirfd int, name string) error { return unix.Mknodat(dirfd, name, mode, dev) })
}

// Readlink returns the target of the symlink at rel.
func (r *Root) Readlink(rel string) ([]byte, error) {
	dirfd, name, done, err := r.parent("readlink", rel)
	if err != nil {
		return nil, err
	}
	defer done()
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return nil, r.fail("readlink", rel, err)
		}
		if n < size {
			return buf[:n], nil
		}
	}
}

// Statfs describes the filesystem the store is on.
func (r *Root) Statfs() (*unix.Statfs_t, error) {
	var s unix.Statfs_t
	return &s, r.fail("statfs", "", unix.Fstatfs(r.fd, &s))
}

// SyncDir makes the entries of directory rel durable.
func (r *Root) SyncDir(rel string) error {
	d, err := r.OpenDir(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	if !r.Ways().DirSync {
		return nil // the filesystem cannot (Ways): its renames are as durable as it makes them
	}
	return r.fail("sync", rel, d.Sync())
}

// setID are the bits the kernel clears before a write by someone who may
// not keep them.
const setID = unix.S_ISUID | unix.S_ISGID

// ClearSetID clears the setuid and setgid bits of the regular file fd
// holds (any descriptor, O_PATH too), as the server, when mode is that
// file's mode with some of them cleared and nothing else changed: the
// kernel's clearing of them before a write or truncate. It reports
// whether mode was that; otherwise nothing is done.
func ClearSetID(fd int, mode uint32) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	cur, want := st.Mode&07777, mode&07777
	if st.Mode&unix.S_IFMT != unix.S_IFREG || want == cur || want&^cur != 0 || (cur&^want)&^setID != 0 {
		return false, nil
	}
	return true, chmodPath(fd, want)
}

// ClearSetIDAt is ClearSetID of rel itself, never of what a link points
// at.
func (r *Root) ClearSetIDAt(rel string, mode uint32) (bool, error) {
	if err := r.gated("chmod", rel); err != nil {
		return false, err
	}
	dirfd, name, done, err := r.parent("chmod", rel)
	if err != nil {
		return false, err
	}
	defer done()
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, r.fail("chmod", rel, err)
	}
	defer unix.Close(fd)
	ok, err := ClearSetID(fd, mode)
	return ok, r.fail("chmod", rel, err)
}
