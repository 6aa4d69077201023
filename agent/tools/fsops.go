package tools

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// Every file operation here runs in the tool process, as the session's
// uid and inside its jail when it has one: the kernel decides what each
// path reaches, and these functions only add what a tool promises on top
// (regular files only, bounded reads, changes that keep the earlier
// content first and never leave a torn file).

type readResult struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Offset    int64  `json:"offset"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated"`
}

// readFile reads at most limit bytes at offset of a regular file. It is
// opened non-blocking, so that a FIFO named by the model cannot hang the
// call before it is refused.
func readFile(a *Args) (any, error) {
	f, st, err := openRegular(a.Path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit := a.Limit
	if limit == 0 {
		limit = MaxOutput
	}
	buf := make([]byte, limit+1)
	n, err := f.ReadAt(buf, a.Offset)
	if err != nil && err != io.EOF {
		return nil, pathErr(FSRead, a.Path, err)
	}
	return readResult{Path: a.Path, Size: st.Size, Offset: a.Offset, Content: string(buf[:min(n, limit)]), Truncated: n > limit}, nil
}

// openRegular opens p with flags (non-blocking, close-on-exec) and
// refuses what is not a regular file: a directory is EISDIR, a device,
// FIFO or socket EINVAL.
func openRegular(p string, flags int) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Open(p, flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, pathErr("open", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	st, err := checkRegular(fd, p)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func checkRegular(fd int, p string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathErr("stat", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return &st, nil
	case unix.S_IFDIR:
		return nil, abi.Errorf(syscall.EISDIR, "", "%s is a directory", p)
	}
	return nil, abi.Errorf(syscall.EINVAL, "", "%s is a %s, not a regular file", p, fileType(st.Mode))
}

type entry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type listResult struct {
	Path      string  `json:"path"`
	Entries   []entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

// listDir lists at most MaxEntries entries of a directory, in the order
// the directory gives them, each described without following a symlink.
func listDir(a *Args) (any, error) {
	fd, err := unix.Open(a.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr(FSList, a.Path, err)
	}
	f := os.NewFile(uintptr(fd), a.Path)
	defer f.Close()
	names, err := f.Readdirnames(MaxEntries + 1)
	if err != nil && err != io.EOF {
		return nil, pathErr(FSList, a.Path, err)
	}
	out := listResult{Path: a.Path, Entries: []entry{}, Truncated: len(names) > MaxEntries}
	for _, name := range names[:min(len(names), MaxEntries)] {
		var st unix.Stat_t
		e := entry{Name: name, Type: "unknown"}
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			e.Type, e.Size = fileType(st.Mode), st.Size
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

type statResult struct {
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Mode     string `json:"mode"`
	Uid      uint32 `json:"uid"`
	Gid      uint32 `json:"gid"`
	Modified string `json:"modified"`
}

func statPath(a *Args) (any, error) {
	var st unix.Stat_t
	if err := unix.Lstat(a.Path, &st); err != nil {
		return nil, pathErr(FSStat, a.Path, err)
	}
	return statResult{Path: a.Path, Type: fileType(st.Mode), Size: st.Size, Mode: fmt.Sprintf("%04o", st.Mode&0o7777),
		Uid: st.Uid, Gid: st.Gid, Modified: time.Unix(st.Mtim.Unix()).UTC().Format(time.RFC3339Nano)}, nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "char"
	case unix.S_IFBLK:
		return "block"
	}
	return "unknown"
}

// target is the file a change acts on: its directory, held open, and its
// name there. Every step after the directory is opened goes through dirfd
// and the name (the *at calls), never through the path again, so a
// directory renamed or swapped for a symlink meanwhile changes nothing.
type target struct {
	path    string // as the model gave it
	abs     string // absolute, for the record
	dirfd   int
	name    string
	file    *os.File     // the file as found, nil when absent
	st      *unix.Stat_t // its stat, when found
	content []byte       // its content, when found
	exact   bool         // a restore's: see openTarget and writeTemp
}

// openTarget opens the directory of p and the file in it: not through a
// final symlink (ELOOP: the link's target is the file to name), only a
// regular file, and only when its content is at most MaxBefore bytes
// (EFBIG: a larger file could not be kept, so it is not changed). A file
// that will be changed is opened for writing, so the kernel checks the
// uid may write it (a hardlink to another user's file is EACCES). exact
// (a restore's call) resolves the directory with no symlink (openDir).
func openTarget(p string, forWrite, exact bool) (*target, error) {
	dir, name := splitPath(p)
	if name == "" || name == "." || name == ".." {
		return nil, abi.Errorf(syscall.EISDIR, "", "%s names a directory, not a file", p)
	}
	dirfd, err := openDir(dir, exact)
	if err != nil {
		return nil, err
	}
	abs, err := heldPath(dirfd, dir, name)
	if err == nil {
		err = recordable(abs)
	}
	if err != nil {
		unix.Close(dirfd)
		return nil, err
	}
	t := &target{path: p, abs: abs, dirfd: dirfd, name: name, exact: exact}
	flags := unix.O_RDONLY
	if forWrite {
		flags = unix.O_RDWR
	}
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case err == unix.ENOENT:
		return t, nil
	case err == unix.ELOOP:
		t.close()
		return nil, abi.Errorf(syscall.ELOOP, "", "%s is a symlink: name the file it points to", p)
	case err != nil:
		t.close()
		return nil, pathErr("open", p, err)
	}
	t.file = os.NewFile(uintptr(fd), p)
	if t.st, err = checkRegular(fd, p); err == nil {
		t.content, err = readBefore(t.file, p)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// openDir opens dir, a change's directory (O_PATH). exact resolves it with
// no symlink (RESOLVE_NO_SYMLINKS): a restore's path is the directory the
// kernel reached when the version was kept, so a symlink in it now was
// put there since, and is not followed (ELOOP).
func openDir(dir string, exact bool) (int, error) {
	flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !exact {
		fd, err := unix.Open(dir, flags, 0)
		return fd, pathErr("open", dir, err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err == unix.ELOOP {
		return -1, abi.Errorf(syscall.ELOOP, "", "%s holds a symlink now: a restore puts a file back only where it was kept, following none", dir)
	}
	return fd, pathErr("open", dir, err)
}

// readBefore reads a file's whole content, at most MaxBefore bytes.
func readBefore(f *os.File, p string) ([]byte, error) {
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, MaxBefore+1)); err != nil {
		return nil, pathErr("read", p, err)
	}
	if b.Len() > MaxBefore {
		return nil, abi.Errorf(syscall.EFBIG, "", "%s is over %d bytes: its earlier content could not be kept, so it is not changed", p, MaxBefore)
	}
	return b.Bytes(), nil
}

func (t *target) close() {
	if t.file != nil {
		t.file.Close()
	}
	unix.Close(t.dirfd)
}

func (t *target) before() *Before {
	return &Before{Path: t.abs, Existed: t.file != nil, Content: t.content}
}

type changeResult struct {
	Path     string `json:"path"`
	Action   string `json:"action"` // create, modify, delete
	Size     int64  `json:"size"`
	Replaced int    `json:"replaced,omitempty"`
}

// change carries out fs.write, fs.replace or fs.remove: it finds the file
// and what it holds, works out the new content (refusing before anything
// is kept when it cannot be made), hands the earlier content to keep, and
// only when keep returns nil puts the new content in place.
func change(name string, a *Args, exact bool, keep func(*Before) error) (any, error) {
	t, err := openTarget(a.Path, name != FSRemove, exact)
	if err != nil {
		return nil, err
	}
	defer t.close()
	res := changeResult{Path: a.Path, Action: "modify"}
	var content []byte
	switch {
	case name == FSRemove && t.file == nil:
		return nil, abi.Errorf(syscall.ENOENT, "", "%s does not exist", a.Path)
	case name == FSRemove:
		res.Action = "delete"
	case name == FSReplace:
		if content, res.Replaced, err = replaced(t, a); err != nil {
			return nil, err
		}
	default:
		content = a.Content
		if t.file == nil {
			res.Action = "create"
		}
	}
	res.Size = int64(len(content))
	if name == FSRemove {
		// Refused now, before anything is kept, when the uid may not
		// change the directory.
		if err := unix.Faccessat2(t.dirfd, ".", unix.W_OK, unix.AT_EACCESS); err != nil {
			return nil, pathErr("remove", a.Path, err)
		}
		if err := keep(t.before()); err != nil {
			return nil, err
		}
		return res, t.remove()
	}
	// The new content is written first: a file the uid may not create
	// there is refused before anything is kept.
	tmp, err := t.writeTemp(content)
	if err != nil {
		return nil, err
	}
	if err := keep(t.before()); err != nil {
		unix.Unlinkat(t.dirfd, tmp, 0)
		return nil, err
	}
	if err := t.renameOver(tmp); err != nil {
		unix.Unlinkat(t.dirfd, tmp, 0)
		return nil, err
	}
	return res, nil
}

// keepOnly carries out fs.keep: the file as it is (or its absence) is
// handed to keep, and nothing is changed. Only a change the uid could
// make is kept (the file opened for writing, a new one's directory
// writable: else EACCES): the path is named by the run's program (a
// CLI's edit), and a version of a file it may only read, or of an
// absence where it may not create, would have a restore of the run, by
// another member of a shared session, write or remove that member's
// file.
func keepOnly(a *Args, keep func(*Before) error) (any, error) {
	t, err := openTarget(a.Path, true, false)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if t.file == nil {
		if err := unix.Faccessat2(t.dirfd, ".", unix.W_OK, unix.AT_EACCESS); err != nil {
			return nil, pathErr("create", a.Path, err)
		}
	}
	res := changeResult{Path: a.Path, Action: "modify", Size: int64(len(t.content))}
	if t.file == nil {
		res.Action = "create"
	}
	return res, keep(t.before())
}

// replaced is the file's content with old replaced by new, where old
// occurs exactly a.Count times.
func replaced(t *target, a *Args) ([]byte, int, error) {
	if t.file == nil {
		return nil, 0, abi.Errorf(syscall.ENOENT, "", "%s does not exist", a.Path)
	}
	n := bytes.Count(t.content, a.Old)
	if n != a.Count {
		return nil, 0, abi.Errorf(syscall.EINVAL, "", "old occurs %d times in %s, not %d: nothing was replaced", n, a.Path, a.Count)
	}
	out := bytes.ReplaceAll(t.content, a.Old, a.New)
	if len(out) > MaxBefore {
		return nil, 0, abi.Errorf(syscall.EFBIG, "", "%s would be over %d bytes", a.Path, MaxBefore)
	}
	return out, n, nil
}

// writeTemp writes content to a new file beside the target, with the
// target's permission bits (0644 for a new file, less the umask; 0600
// for one a restore makes: a version keeps a file's bytes, not its mode,
// and a secret kept 0600 must not come back readable by every user).
func (t *target) writeTemp(content []byte) (string, error) {
	mode := uint32(0o644)
	switch {
	case t.st != nil:
		mode = t.st.Mode & 0o7777
	case t.exact:
		mode = 0o600
	}
	for i := 0; ; i++ {
		tmp := fmt.Sprintf(".%s.ctxfs-tool-%d-%d", truncName(t.name), os.Getpid(), i)
		fd, err := unix.Openat(t.dirfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == unix.EEXIST && i < 100 {
			continue
		}
		if err != nil {
			return "", pathErr("create", t.path, err)
		}
		f := os.NewFile(uintptr(fd), tmp)
		err = writeAll(f, content, t.st != nil, mode)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			unix.Unlinkat(t.dirfd, tmp, 0)
			return "", pathErr("write", t.path, err)
		}
		return tmp, nil
	}
}

func writeAll(f *os.File, content []byte, keepMode bool, mode uint32) error {
	if keepMode { // the umask must not take bits the file had
		if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
			return err
		}
	}
	if _, err := f.Write(content); err != nil {
		return err
	}
	return f.Sync()
}

// truncName keeps a temporary file's name within NAME_MAX.
func truncName(name string) string {
	if len(name) > 200 {
		return name[:200]
	}
	return name
}

// renameOver puts tmp in place of the target's name, so that a reader
// sees the old file or the new one, never a part; the name must still
// hold what was kept (a file swapped in meanwhile, by another process of
// the uid, is EAGAIN and stays). A new file takes a
// name that is still free (RENAME_NOREPLACE); an existing one is swapped
// (RENAME_EXCHANGE) and the file swapped out checked to be the one that
// was kept, else swapped back. A filesystem without these flags gets a
// check and a plain rename.
func (t *target) renameOver(tmp string) error {
	if t.file == nil {
		err := unix.Renameat2(t.dirfd, tmp, t.dirfd, t.name, unix.RENAME_NOREPLACE)
		if err == unix.EEXIST {
			return abi.Errorf(syscall.EAGAIN, "", "%s was created meanwhile; it was not changed", t.path)
		}
		if err != unix.EINVAL && err != unix.ENOSYS {
			return pathErr("rename", t.path, err)
		}
	} else if err := unix.Renameat2(t.dirfd, tmp, t.dirfd, t.name, unix.RENAME_EXCHANGE); err == nil {
		if !t.same(tmp) {
			unix.Renameat2(t.dirfd, tmp, t.dirfd, t.name, unix.RENAME_EXCHANGE)
			return t.changedMeanwhile()
		}
		return pathErr("unlink", t.path, unix.Unlinkat(t.dirfd, tmp, 0))
	} else if err != unix.EINVAL && err != unix.ENOSYS {
		return pathErr("rename", t.path, err)
	}
	if !t.same(t.name) {
		return t.changedMeanwhile()
	}
	return pathErr("rename", t.path, unix.Renameat(t.dirfd, tmp, t.dirfd, t.name))
}

// remove unlinks the target's name, if it still holds what was kept.
func (t *target) remove() error {
	if !t.same(t.name) {
		return t.changedMeanwhile()
	}
	return pathErr("unlink", t.path, unix.Unlinkat(t.dirfd, t.name, 0))
}

// same reports whether name in the target's directory is the file that
// was kept, or, for a target that was absent, is still absent.
func (t *target) same(name string) bool {
	var st unix.Stat_t
	err := unix.Fstatat(t.dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if t.st == nil {
		return err == unix.ENOENT
	}
	return err == nil && st.Dev == t.st.Dev && st.Ino == t.st.Ino
}

func (t *target) changedMeanwhile() error {
	return abi.Errorf(syscall.EAGAIN, "", "%s changed while its earlier content was kept; it was not changed", t.path)
}

// splitPath splits p at its last slash, without cleaning it: "a/../b"
// must mean what the kernel makes of it, through a/ whatever a is.
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return ".", p
	case i == 0:
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// heldPath is the absolute path of name in the directory dirfd holds
// (dir as the model named it), for the record: the path a restore will
// write. It is the directory the kernel reached, as /proc names it (the
// run's own /proc, so inside a jail a jail's path), not dir cleaned as
// text: "work/link/../x" is x beside link's target, not work/x. Without
// /proc the text is taken only when no ".." in it could have gone
// through a symlink (EINVAL otherwise: the change's file could not be
// named for its version).
func heldPath(dirfd int, dir, name string) (string, error) {
	if reached, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(dirfd)); err == nil && path.IsAbs(reached) {
		return path.Join(reached, name), nil
	}
	for _, part := range strings.Split(dir, "/") {
		if part == ".." {
			return "", abi.Errorf(syscall.EINVAL, "", "%s/%s: which file this names cannot be told without /proc; name it without \"..\"", dir, name)
		}
	}
	if !path.IsAbs(dir) {
		wd, err := os.Getwd()
		if err != nil {
			return "", pathErr("getwd", dir, err)
		}
		dir = path.Join(wd, dir)
	}
	return path.Join(dir, name), nil
}

// recordable is EINVAL for a path a version cannot name: its index line
// holds the path as a JSON string, which is UTF-8, so a byte of another
// encoding ("caf\xe9", Latin-1) would be kept as U+FFFD, and a restore
// would write another file than the one changed.
func recordable(abs string) error {
	if !utf8.ValidString(abs) {
		return abi.Errorf(syscall.EINVAL, "", "%q is not UTF-8: its version could not name it, so it is not changed", abs)
	}
	return nil
}

// pathErr is err (nil stays nil) as an *abi.Error naming op and p.
func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return abi.Errorf(abi.Errno(err), "", "%s %s: %v", op, p, errnoText(err))
}

func errnoText(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	return err.Error()
}
