package storefs

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// Move renames oldRel to newRel, never over anything: EEXIST when newRel
// is there, and then nothing is changed. It is the store's atomic move (a
// new session into place, a session archived or set aside, a seal key
// committed): renameat2(RENAME_NOREPLACE) where the filesystem has it,
// else a portable way with the same guarantee (Ways):
//
//   - a file is linked to newRel (linkat refuses an existing name, as
//     atomically as RENAME_NOREPLACE), then its old name unlinked. A crash
//     between the two leaves both names on one inode: the move is done
//     (newRel holds the whole file), and FinishMove takes the old name
//     away; no caller writes through an old name (they create their
//     temporaries afresh).
//   - a directory (and a file where there are no hard links) is renamed
//     with a plain rename after newRel was seen absent. rename(2) never
//     replaces a non-empty directory (ENOTEMPTY, given as EEXIST) nor puts
//     a directory over a file (ENOTDIR): what such a move could replace is
//     only an empty directory made in the instant between the look and
//     the rename, which holds nothing. The store's directories that are
//     moved (sessions) are never empty, so two moves to one name still
//     refuse the second. A crash leaves the directory at its old name or
//     its new one, never both, never half: the rename is one step.
func (r *Root) Move(oldRel, newRel string) error {
	if r.Ways().NoReplace {
		return r.Rename(oldRel, newRel, unix.RENAME_NOREPLACE)
	}
	st, err := r.Lstat(oldRel)
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && r.Ways().Link {
		return r.linkThenUnlink(oldRel, newRel)
	}
	if _, err := r.Lstat(newRel); !errors.Is(err, fs.ErrNotExist) {
		if err == nil {
			err = r.fail("rename", newRel, unix.EEXIST)
		}
		return err
	}
	err = r.Rename(oldRel, newRel, 0)
	if errors.Is(err, unix.ENOTEMPTY) {
		err = r.fail("rename", newRel, unix.EEXIST)
	}
	return err
}

// linkThenUnlink is Move of a file by hard link: newRel is made (or
// refused with EEXIST), then oldRel taken away.
func (r *Root) linkThenUnlink(oldRel, newRel string) error {
	if err := r.Link(oldRel, newRel); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op = "rename"
		}
		return err
	}
	return r.Remove(oldRel)
}

// FinishMove finishes a Move of a file that a crash cut between its link
// and its unlink: when oldRel and newRel are one inode, oldRel is taken
// away. It changes nothing otherwise (either name may be missing).
func (r *Root) FinishMove(oldRel, newRel string) error {
	o, err := r.Lstat(oldRel)
	if err != nil {
		return ignoreNotExist(err)
	}
	n, err := r.Lstat(newRel)
	if err != nil {
		return ignoreNotExist(err)
	}
	if o.Dev != n.Dev || o.Ino != n.Ino || o.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil
	}
	return ignoreNotExist(r.Remove(oldRel))
}

// ignoreNotExist is err, but nil for a name already gone.
func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Swap exchanges the files at spareRel and rel so that readers of rel
// see its old value or its new one, never a mix: renameat2
// (RENAME_EXCHANGE) where the filesystem has it, after which spareRel
// holds the old value. Without it, spareRel is renamed over rel (just as
// atomic for readers of rel) and spareRel is gone afterwards: it is for a
// spare that holds nothing anyone needs (layout.ReplaceValue's twin, made
// again next time). ENOENT when rel is not there, as RENAME_EXCHANGE says,
// in both ways.
func (r *Root) Swap(spareRel, rel string) error {
	if r.Ways().Exchange {
		return r.Rename(spareRel, rel, unix.RENAME_EXCHANGE)
	}
	if _, err := r.Lstat(rel); err != nil {
		return err
	}
	return r.Rename(spareRel, rel, 0)
}
