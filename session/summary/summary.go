// Package summary reads and writes a session's context/summary.md (SPEC
// 18: the rolling summary of a model run's earlier conversation, with the
// cursor of the last message it covers; agent/window says its format).
// The file lives in the session's free tree, the user's: it is read and
// written through the tree's door (freetree.Tree) as the run's uid,
// charged to that uid's quota, never following a symlink and never
// blocking on a FIFO a user left there.
//
// It never touches messages.jsonl or any log, and decides nothing about
// what a summary says.
package summary

import (
	"io"
	"os"
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
)

// MaxFile bounds what is read of summary.md: a summary is at most
// window.MaxSummaryTokens (a few tens of KiB); a larger file is not one
// this server wrote, and is ignored (rebuilt at the next compaction).
const MaxFile = 256 << 10

// Read is summary.md's content as c may read it; nil when it is missing,
// not a regular file, too large or unreadable: the summary is then
// rebuilt.
func Read(t freetree.Tree, c layout.Caller, rel string) []byte {
	f, err := t.Open(c, rel, os.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		return nil
	}
	defer f.OS().Close()
	st, err := f.OS().Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > MaxFile {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f.OS(), MaxFile+1))
	if err != nil || len(b) > MaxFile {
		return nil
	}
	return b
}

// Write replaces summary.md with data, as c (made 0600 when missing):
// written whole under a temporary name beside it, then renamed over it,
// so that a summary refused (its owner's quota, EDQUOT; a full disk) or
// cut short leaves the one before it as it was (written in place, it was
// truncated first and then refused: empty). Something at rel that is not
// a regular file (the owner's symlink or FIFO) is left as it is: EINVAL.
func Write(t freetree.Tree, c layout.Caller, rel string, data []byte) error {
	if st, err := t.Lstat(rel); err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return abi.Errorf(syscall.EINVAL, "write", "%s is not a regular file", rel)
	}
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+".new")
	err := t.WriteFile(c, tmp, data, 0o600)
	if err == nil {
		err = t.Rename(c, tmp, rel, 0)
	}
	if err != nil {
		t.Remove(c, tmp)
	}
	return err
}
