package storefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Ways is what the store's filesystem gives, probed once per Root (the
// first time a move or a swap needs it, or Ways is asked): distributed
// filesystems (NFS, GlusterFS, MooseFS) refuse renameat2's flags with
// EINVAL and MooseFS O_TMPFILE with ENOTSUP, and the store must keep its
// guarantees there by portable ways (Move, Swap). A false field is a way
// the store does without.
type Ways struct {
	NoReplace bool // renameat2(RENAME_NOREPLACE); else Move checks, then renames or links
	Exchange  bool // renameat2(RENAME_EXCHANGE); else Swap renames over
	Tmpfile   bool // open(O_TMPFILE); the store never needs it (it names its temporaries)
	Resolve   bool // openat2 with RESOLVE_BENEATH and friends; the store cannot do without
	Link      bool // linkat; else Move of a file checks, then renames
	DirSync   bool // fsync of a directory; else SyncDir is a no-op on EINVAL
	// BlocksNow: st_blocks counts what an open file holds (MooseFS says 0
	// until the file is closed, even after fsync): else what a file costs
	// is judged by its size too (the free trees' quota, freetree).
	BlocksNow bool
	Forced    string
}

// PortableEnv names the test and operations knob that makes the store do
// without ways its filesystem has: "all", or a comma list of
// "noreplace", "exchange", "tmpfile", "link", "dirsync", "blocks" (the tests run the
// store's suite so, as it runs on NFS, GlusterFS or MooseFS).
const PortableEnv = "CTXFS_STORE_PORTABLE"

// ProbePrefix starts the name of the probe's scratch directory at the
// store's top; a probe removes what an interrupted one left, and fsck
// passes over it.
const ProbePrefix = ".ctxfs.probe-"

// ways is a Root's probe, shared by its ShowAs and As copies.
type ways struct {
	once sync.Once
	w    Ways
}

// Ways probes (once) and returns what the store's filesystem gives.
func (r *Root) Ways() Ways {
	r.ways.once.Do(func() { r.ways.w = r.probe(os.Getenv(PortableEnv)) })
	return r.ways.w
}

// WaysFile is where the server records, at each mount, the ways it
// probed (in its state directory, layout.StateDir), for fsck and doctor to
// say without probing: a probe writes in the store, and they only look.
const WaysFile = ".ctxfs/ways"

// RecordWays probes (once) and records the ways in WaysFile (its
// directory is made 0700 when missing), replaced atomically.
func (r *Root) RecordWays() error {
	dir, _ := split(WaysFile)
	if err := r.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	own := Owner{Uid: os.Geteuid(), Gid: os.Getegid(), DirMode: 0o700, FileMode: 0o600}
	return r.ReplaceFile(WaysFile, []byte(r.Ways().String()+"\n"), own, NoSync)
}

// RecordedWays is what the last server's RecordWays wrote, "" when no
// server recorded any.
func (r *Root) RecordedWays() (string, error) {
	b, err := r.ReadFile(WaysFile, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSuffix(string(b), "\n"), err
}

// Portable reports whether recorded ways (Ways.String) name a portable
// way: fsck says the ways only then, so its output on a store that uses
// its filesystem's own ways stays as it was.
func Portable(recorded string) bool {
	return strings.Contains(recorded, "portable") || strings.Contains(recorded, ": no")
}

// String says which ways a store uses, for the log, doctor and fsck.
func (w Ways) String() string {
	say := func(have bool, native, portable string) string {
		if have {
			return native
		}
		return portable
	}
	s := strings.Join([]string{
		say(w.NoReplace, "moves: renameat2(RENAME_NOREPLACE)", "moves: portable (link+unlink for a file, check+rename for a directory)"),
		say(w.Exchange, "derived values: renameat2(RENAME_EXCHANGE)", "derived values: portable (rename over)"),
		say(w.Tmpfile, "O_TMPFILE: yes (unused)", "O_TMPFILE: no (unused: named temporaries)"),
		say(w.Resolve, "walks: openat2(RESOLVE_BENEATH)", "walks: openat2 missing"),
		say(w.Link, "hard links: yes", "hard links: no"),
		say(w.DirSync, "directory fsync: yes", "directory fsync: no (skipped)"),
		say(w.BlocksNow, "open files' blocks: counted", "open files' blocks: portable (charged by size too)"),
	}, "; ")
	if w.Forced != "" {
		s += "; forced by " + PortableEnv + "=" + w.Forced
	}
	return s
}

// probe tries each way in a scratch directory of the store, then takes
// away those the knob forces off. A probe that cannot make its scratch
// (a read-only store) assumes the portable ways: they are right
// everywhere, only slower.
func (r *Root) probe(forced string) Ways {
	r = r.ungated() // its scratch holds nothing, and must not be left behind
	w := Ways{Forced: forced}
	r.removeProbeLeftovers()
	var b [8]byte
	rand.Read(b[:])
	dir := ProbePrefix + hex.EncodeToString(b[:])
	if err := unix.Mkdirat(r.fd, dir, 0o700); err == nil {
		defer r.RemoveAll(dir)
		if fd, err := r.openat2(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			w = probeIn(fd)
			w.Forced = forced
			unix.Close(fd)
		}
	}
	return w.without(forced)
}

// probeIn tries each way in the empty directory dirfd.
func probeIn(dirfd int) Ways {
	var w Ways
	for _, name := range []string{"a", "b"} {
		fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return w
		}
		unix.Close(fd)
	}
	w.Resolve = true // the scratch was opened by openat2
	// Both halves: a filesystem may take the flag where it refuses anyway
	// and not where it must move (MooseFS: EEXIST onto an existing name,
	// EINVAL onto a missing one).
	w.NoReplace = unix.Renameat2(dirfd, "a", dirfd, "b", unix.RENAME_NOREPLACE) == unix.EEXIST &&
		unix.Renameat2(dirfd, "a", dirfd, "d", unix.RENAME_NOREPLACE) == nil &&
		unix.Renameat(dirfd, "d", dirfd, "a") == nil
	w.Exchange = unix.Renameat2(dirfd, "a", dirfd, "b", unix.RENAME_EXCHANGE) == nil
	w.Link = unix.Linkat(dirfd, "a", dirfd, "c", 0) == nil
	if fd, err := unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600); err == nil {
		w.Tmpfile = true
		unix.Close(fd)
	}
	w.DirSync = unix.Fsync(dirfd) == nil
	w.BlocksNow = blocksWhileOpen(dirfd)
	return w
}

// blocksWhileOpen writes 64 KiB to a new file of dirfd and says whether
// the open file's st_blocks counts them, as a write through the mount
// would be charged (before any close or sync).
func blocksWhileOpen(dirfd int) bool {
	fd, err := unix.Openat(dirfd, "blocks", unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	const size = 64 << 10
	var st unix.Stat_t
	if n, err := unix.Write(fd, make([]byte, size)); err != nil || n != size || unix.Fstat(fd, &st) != nil {
		return false
	}
	return st.Blocks*512 >= size
}

// without takes away the ways forced lists.
func (w Ways) without(forced string) Ways {
	for _, word := range strings.Split(forced, ",") {
		all := word == "all"
		if all || word == "noreplace" {
			w.NoReplace = false
		}
		if all || word == "exchange" {
			w.Exchange = false
		}
		if all || word == "tmpfile" {
			w.Tmpfile = false
		}
		if all || word == "link" {
			w.Link = false
		}
		if all || word == "dirsync" {
			w.DirSync = false
		}
		if all || word == "blocks" {
			w.BlocksNow = false
		}
	}
	return w
}

// removeProbeLeftovers removes the scratch an interrupted probe left: one
// older than a minute (a younger one may be another process's probe at
// work, fsck's beside a server's).
func (r *Root) removeProbeLeftovers() {
	ents, err := r.ReadDir(".")
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name, ProbePrefix) {
			continue
		}
		if st, err := r.Lstat(e.Name); err == nil && time.Since(time.Unix(st.Mtim.Unix())) > time.Minute {
			r.RemoveAll(e.Name)
		}
	}
}
