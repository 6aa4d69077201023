// Package filestamp tells whether a file is still the one that was read:
// its identity and times as a stat saw them (Stamp), and whether it
// changed too recently for its times to tell the next change apart
// (ChangedWithin); and it keeps what was found of files by their stamps
// under that rule, bounded (Memo). The definition cache (agent/def), the
// engine's memory of a session's meta.json and the versions' checks
// (session/versions) keep a parse or a verdict only while a stat finds
// the same stamp.
//
// It only compares and keeps what it is given: it never stats, opens,
// reads or follows a path itself (each caller stats the way its reads
// went: through the store's door, or the host's paths as the loader
// followed them), nor judges what it keeps.
package filestamp

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RacyWindow: a file changed less than this long before it was read may
// change again within the same tick of its filesystem's clock (coarse:
// milliseconds on ext4, a second on MooseFS and elsewhere) without its
// times moving, so what was read then must not be kept on its stamp
// (ChangedWithin).
const RacyWindow = 2 * time.Second

// Stamp is a file as a stat saw it: the same device and inode (a file
// replaced is another inode), mode, size, mtime and ctime (an edit in
// place moves the ctime, even one of the same length that sets the
// mtime back).
type Stamp struct {
	Dev, Ino     uint64
	Mode         uint32
	Size         int64
	Mtime, Ctime unix.Timespec
}

// Of is st's stamp.
func Of(st *unix.Stat_t) Stamp {
	return Stamp{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size, Mtime: st.Mtim, Ctime: st.Ctim}
}

// OfInfo is fi's stamp, from the stat it came from; the zero Stamp when
// fi holds no stat (its Ino 0 is no file's: compare it with nothing).
func OfInfo(fi os.FileInfo) Stamp {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stamp{}
	}
	return Stamp{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
		Mtime: unix.Timespec(st.Mtim), Ctime: unix.Timespec(st.Ctim)}
}

// ChangedWithin reports whether the file's mtime or ctime is less than d
// before now.
func (s Stamp) ChangedWithin(d time.Duration, now time.Time) bool {
	limit := now.Add(-d).UnixNano()
	return s.Mtime.Nano() > limit || s.Ctime.Nano() > limit
}
