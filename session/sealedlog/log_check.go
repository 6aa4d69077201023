package sealedlog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Check returns nil when the log is provable, else an EIO *abi.Error that
// says what is wrong. It is cheap while nobody else touches the file: it
// compares the file's inode, size and ctime with what we recorded after our
// own last write, and re-reads the whole file only when they differ. Once a
// Log is unprovable it stays so, even if the file is put back.
//
// (ctime is the witness of foreign writes. On kernels with coarse, not
// multigrain, timestamps, a same-size rewrite within one clock tick of our
// own write would go unnoticed here; Open and Verify still catch it.)
func (l *Log) Check() error {
	if l.mem {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

func (l *Log) checkLocked() error {
	if l.bad != nil {
		return l.bad
	}
	if l.closed {
		return abi.Errorf(syscall.EBADF, "check", "%s: log is closed", l.name())
	}
	if l.quickCheck() {
		return nil
	}
	if err := l.checkSeal(); err != nil {
		return err
	}
	l.pathChecked = time.Now()
	st, err := l.at.Root.Lstat(l.at.Log)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && stampOf(st) == l.stamp {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) && !storefs.IsUnsafe(err) {
		return osError("check", l.name(), err) // not proof of damage: maybe transient
	}
	return l.reverify()
}

// pathCheckEvery is how often Check also looks at the names of the log
// and its seal (a walk of the store's path for each), to see a file
// renamed away or replaced. Between those, it looks at the open files only:
// an fstat of each shows a write behind our back, a rename or a new link
// (each changes the file's ctime), and a file unlinked (no links left).
// A session directory swapped as a whole leaves the files untouched: the
// names show it, within pathCheckEvery. Two path walks per log per
// append were a tenth of a send's CPU.
const pathCheckEvery = time.Second

// quickCheck reports whether the open files are as we left them and the
// names were checked recently.
func (l *Log) quickCheck() bool {
	if time.Since(l.pathChecked) >= pathCheckEvery || l.seal == nil {
		return false
	}
	var st, sst unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &st) != nil || unix.Fstat(int(l.seal.Fd()), &sst) != nil {
		return false
	}
	return st.Nlink > 0 && stampOf(&st) == l.stamp && stampOf(&sst) == l.sealStamp
}

// checkSeal makes the Log unprovable when the seal's name no longer holds
// the seal we write to: deleted or replaced behind our back, the seal
// would no longer prove anything after a restart, so nothing more may be
// acknowledged on its strength.
func (l *Log) checkSeal() error {
	st, err := l.at.Root.Lstat(l.at.Seal)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l.damaged("seal is missing")
	case storefs.IsUnsafe(err):
		return l.damaged("seal: " + storefs.Words(err))
	case err != nil:
		return osError("check", l.sealName(), err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return l.damaged("seal: " + storefs.TypeName(st.Mode) + ", not a regular file")
	case (fileID{uint64(st.Dev), st.Ino}) != l.sealID:
		return l.damaged("seal was replaced")
	}
	l.sealStamp = stampOf(st)
	return nil
}

// reverify compares the file at the path, whole, with the in-memory truth.
// A match (a touch, or the file replaced by an identical copy) records the
// new stamp and follows the new inode; a mismatch makes the Log unprovable.
func (l *Log) reverify() error {
	l.verifies.Add(1)
	f, err := l.at.Root.OpenFile(l.at.Log, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l.damaged("log file is missing")
	case storefs.IsUnsafe(err):
		return l.damaged(storefs.Words(err))
	case err != nil:
		return osError("check", l.name(), err)
	}
	what, st, err := l.differs(f)
	if err != nil || what != "" {
		f.Close()
		if err != nil {
			return osError("check", l.name(), err)
		}
		return l.damaged(what)
	}
	l.follow(f, st)
	return nil
}

// differs says how the file's content differs from the committed length
// and digest ("" when identical), with the stat it took first.
func (l *Log) differs(f *os.File) (string, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", nil, err
	}
	if size := l.Size(); st.Size != size {
		return fmt.Sprintf("length %d does not match seal %d", st.Size, size), &st, nil
	}
	// The digest covers what is durable; a journaled log's newest bytes
	// are checked once the journal holds them.
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, l.durableLen))
	if err != nil {
		return "", nil, err
	}
	if n != l.durableLen || [sha256.Size]byte(h.Sum(nil)) != l.digest {
		return fmt.Sprintf("content does not match the seal's digest (length %d)", l.durableLen), &st, nil
	}
	return "", &st, nil
}

// follow adopts f as the log file if it is a different inode from ours
// (replaced by an identical copy), and records its stamp.
func (l *Log) follow(f *os.File, st *unix.Stat_t) {
	l.stamp = stampOf(st)
	var cur unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &cur); err == nil && cur.Ino == st.Ino && uint64(cur.Dev) == uint64(st.Dev) {
		f.Close()
		return
	}
	l.fdMu.Lock()
	old := l.f
	l.f = f
	l.fdMu.Unlock()
	l.changes.Add(1)
	old.Close()
}

// damaged makes the Log unprovable for good. It writes nothing: refused
// history is left exactly as it was found. (The seal only ever holds
// committed records, so a later Open reports the damage instead of taking
// a cut in the last append for an interrupted one.)
func (l *Log) damaged(what string) error {
	l.changes.Add(1)
	l.bad = unprovable(l.name(), what)
	return l.bad
}

// Refuse makes the Log unprovable for a reason outside the log itself (its
// session's identity is missing or names another place): nothing is
// appended to it again, and nothing is written to say so.
func (l *Log) Refuse(what string) {
	if l.mem {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bad == nil {
		l.bad = unprovable(l.name(), what)
	}
}
