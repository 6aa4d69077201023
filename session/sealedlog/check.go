package sealedlog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
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
		return abi.Errorf(syscall.EBADF, "check", "%s: log is closed", l.path)
	}
	var st unix.Stat_t
	err := unix.Stat(l.path, &st)
	if err == nil && stampOf(&st) == l.stamp {
		return nil
	}
	if err != nil && err != unix.ENOENT {
		return osError("check", l.path, err) // not proof of damage: maybe transient
	}
	return l.reverify()
}

// reverify compares the file at the path, whole, with the in-memory truth.
// A match (a touch, or the file replaced by an identical copy) records the
// new stamp and follows the new inode; a mismatch makes the Log unprovable.
func (l *Log) reverify() error {
	l.verifies.Add(1)
	f, err := os.OpenFile(l.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return l.damaged("log file is missing")
	}
	if err != nil {
		return osError("check", l.path, err)
	}
	what, st, err := l.differs(f)
	if err != nil || what != "" {
		f.Close()
		if err != nil {
			return osError("check", l.path, err)
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
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size))
	if err != nil {
		return "", nil, err
	}
	if n != st.Size || [sha256.Size]byte(h.Sum(nil)) != l.digest {
		return fmt.Sprintf("content does not match the seal's digest (length %d)", l.Size()), &st, nil
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
	old.Close()
}

// damaged makes the Log unprovable for good. It writes nothing: refused
// history is left exactly as it was found. (Every acknowledged batch is
// already marked committed by commitLazily, so a later Open reports the
// damage instead of taking a cut in the last append for an interrupted one.)
func (l *Log) damaged(what string) error {
	l.bad = unprovable(l.path, what)
	return l.bad
}
