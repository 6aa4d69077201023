package storefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Entry is one name of a directory and the type getdents reported for it
// (unix.DT_REG, unix.DT_DIR, unix.DT_LNK, …): no stat, no path.
type Entry struct {
	Name string
	Ino  uint64
	Type uint8
}

// IsDir and IsRegular say what the entry is, as the directory says.
func (e Entry) IsDir() bool     { return e.Type == unix.DT_DIR }
func (e Entry) IsRegular() bool { return e.Type == unix.DT_REG }

// ReadDir lists the directory rel ("." and ".." left out), in the order
// the filesystem gives. Entries are read from the directory's own
// descriptor: os.File.ReadDir would lstat names by path.
func (r *Root) ReadDir(rel string) ([]Entry, error) {
	d, err := r.OpenDir(rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := listFd(int(d.Fd()))
	if err != nil {
		return nil, r.fail("readdir", rel, err)
	}
	return ents, nil
}

// parseDirents appends the entries of a getdents64 buffer: each record is
// ino (8), off (8), reclen (2), type (1), then the NUL-terminated name.
func parseDirents(b []byte, out []Entry) []Entry {
	for len(b) >= 19 {
		reclen := int(b[16]) | int(b[17])<<8
		if reclen < 19 || reclen > len(b) {
			break
		}
		ino := uint64(0)
		for i := 7; i >= 0; i-- {
			ino = ino<<8 | uint64(b[i])
		}
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, Entry{Name: s, Ino: ino, Type: b[18]})
		}
		b = b[reclen:]
	}
	return out
}

// tempName is a fresh hidden name for a temporary beside name: 64 random
// bits, so that no two attempts collide.
func tempName(prefix string) string {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand: getrandom(2); it does not fail on Linux
	return prefix + hex.EncodeToString(b[:])
}

// replaceMark is what the name of ReplaceFile's temporary carries.
const replaceMark = ".tmp-"

// IsReplaceTemp reports whether name is a temporary ReplaceFile makes
// (".NAME.tmp-" and 16 hex digits): one still there after a crash is what
// an interrupted replace left, which nobody relies on.
func IsReplaceTemp(name string) bool {
	i := strings.LastIndex(name, replaceMark)
	if !strings.HasPrefix(name, ".") || i < 2 {
		return false
	}
	suffix := name[i+len(replaceMark):]
	_, err := hex.DecodeString(suffix)
	return len(suffix) == 16 && err == nil && strings.ToLower(suffix) == suffix
}

// RemoveTemps removes from the directory dir the temporaries that
// interrupted ReplaceFile calls left, and the entries also names (the
// caller's own leftovers, removed whole). Callers run it when they load
// the directory, before anything of theirs can be in flight there.
func (r *Root) RemoveTemps(dir string, also func(name string) bool) {
	ents, err := r.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		switch {
		case IsReplaceTemp(e.Name):
			r.Remove(join(dir, e.Name))
		case also != nil && also(e.Name):
			r.RemoveAll(join(dir, e.Name))
		}
	}
}

// MkdirTemp makes a new directory named prefix+random in dir with perm and
// returns its path.
func (r *Root) MkdirTemp(dir, prefix string, perm os.FileMode) (string, error) {
	for {
		rel := join(dir, tempName(prefix))
		err := r.Mkdir(rel, perm)
		if !errors.Is(err, fs.ErrExist) {
			return rel, err
		}
	}
}

// Owner is who owns what the engine makes in one home or shared space,
// and with which modes: a private home is its uid's alone (0700/0600); a
// shared space's files belong to the writing uid and the space's group,
// with group access (0770/0660), so that the kernel enforces both through
// the mount. An id of -1 keeps the one the creating process has.
type Owner struct {
	Uid, Gid          int
	DirMode, FileMode os.FileMode
}

// MkdirOwned makes the directory rel with own's mode and owner. As root
// the directory is born own's (bornAs): made by the server and then given
// to own, a kill between the two left a directory of root's where a
// user's belongs, which its user could not write in
// (TestHistoryFaultSchedules met an agent's root/ so in CI). The chown
// after it stays for what bornAs cannot set (a setgid parent's group
// wins over the filesystem gid) and for a server that is not root.
func (r *Root) MkdirOwned(rel string, own Owner) error {
	if err := r.mkdir(rel, own.DirMode, own); err != nil {
		return err
	}
	return r.ChownOwned(rel, own)
}

// Sync says how durable a replace is when ReplaceFile returns.
type Sync uint8

const (
	// NoSync: nothing is synced; after a power loss the name may hold the
	// old content, or the new, or be empty.
	NoSync Sync = iota
	// SyncData: the new content is synced before the rename, so the name
	// holds the old content or the whole new one, never less; after a power
	// loss it may still hold the old one.
	SyncData
	// SyncAll: the content and then the directory are synced: the new
	// content is durable under its name.
	SyncAll
)

// ReplaceFile replaces rel atomically with data: a temporary file beside
// it (".NAME.tmp-<random>", created exclusively) gets the data, exactly
// own's file mode and owner, then is renamed over rel. Readers see the old
// or the new content, never a mix. Only a regular file is replaced: what
// else is at rel (a planted symlink) is refused, never followed and never
// silently removed, so that fsck can name it. sync says what is durable
// when it returns.
func (r *Root) ReplaceFile(rel string, data []byte, own Owner, sync Sync) error {
	if err := r.Replaceable(rel); err != nil {
		return err
	}
	dir, name := split(rel)
	var tmp string
	var f *os.File
	for {
		var err error
		tmp = join(dir, tempName("."+name+replaceMark))
		f, err = r.OpenFile(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, own.FileMode)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	err := writeOwned(f, data, own, sync >= SyncData)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(tmp, rel, 0)
	}
	if err != nil {
		r.Remove(tmp)
		return r.fail("replace", rel, unwrapPath(err))
	}
	if sync == SyncAll {
		return r.SyncDir(dir)
	}
	return nil
}

// Replaceable is nil when rel holds a regular file or nothing: what may be
// replaced by a rename. Anything else is an *UnsafeError.
func (r *Root) Replaceable(rel string) error {
	st, err := r.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return r.check("replace", rel, st, Regular)
}

// writeOwned writes data to a new file, gives it to own and syncs it when
// asked.
func writeOwned(f *os.File, data []byte, own Owner, sync bool) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := Fchown(f, own); err != nil {
		return err
	}
	if sync {
		return unix.Fdatasync(int(f.Fd()))
	}
	return nil
}

// Fchown gives an open file to own. A server that is not root cannot give
// files away, and everything it makes is its own anyway: EPERM is then
// not an error.
func Fchown(f *os.File, own Owner) error {
	if own.Uid < 0 && own.Gid < 0 {
		return nil
	}
	err := unix.Fchown(int(f.Fd()), own.Uid, own.Gid)
	if err == unix.EPERM && os.Geteuid() != 0 {
		return nil
	}
	return err
}

// ChownOwned is Chown with Fchown's leniency for a server that is not root.
func (r *Root) ChownOwned(rel string, own Owner) error {
	if own.Uid < 0 && own.Gid < 0 {
		return nil
	}
	err := r.Chown(rel, own.Uid, own.Gid)
	if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
		return nil
	}
	return err
}

// unwrapPath drops a *fs.PathError's own op and path, so that the caller
// can name the file it meant.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func join(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return dir + "/" + name
}
