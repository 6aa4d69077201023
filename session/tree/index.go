package tree

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/session/layout"
)

// IndexValue is the session an index value names (index/current or an
// entry of by-cwd/, by-hash/, by-uuid/); ENOENT when none.
func (t Tree) IndexValue(pl layout.Place) (string, error) {
	x, err := t.e.Index(pl.Container)
	if err != nil {
		return "", err
	}
	if pl.Kind == layout.PlaceIndexCurrent {
		if cur := x.Current(); cur != "" {
			return cur, nil
		}
		return "", syscall.ENOENT
	}
	return x.Lookup(pl.IndexKind, pl.Key)
}

// IndexList is the content of index/list: always current, unlike the
// store's snapshot.
func (t Tree) IndexList(ct layout.Container) ([]byte, error) {
	x, err := t.e.Index(ct)
	if err != nil {
		return nil, err
	}
	return x.ListBytes(), nil
}

// CheckIndexValue judges a value written to index/current or an entry
// before its close: a session name (EINVAL) of a session the container
// holds (ENOENT), and for an entry not kept yet, room for one more name
// (EDQUOT, quota.Names).
func (t Tree) CheckIndexValue(pl layout.Place, data []byte) error {
	name, err := index.ParseValue(data)
	if err != nil {
		return err
	}
	if !layout.IsDir(t.root, layout.Ref{Container: pl.Container, Name: name}.Rel()) {
		return abi.Errorf(syscall.ENOENT, "write", "no session %q", name)
	}
	if pl.Kind != layout.PlaceIndexEntry {
		return nil
	}
	x, err := t.e.Index(pl.Container)
	if err != nil {
		return err
	}
	return x.CheckNew(pl.IndexKind, pl.Key)
}

// WriteIndex replaces index/current or an entry of by-hash/ or by-uuid/
// with the session named by data (SPEC 9): EINVAL for a bad name, ENOENT
// for a session that does not exist, EPERM for by-cwd.
func (t Tree) WriteIndex(c layout.Caller, pl layout.Place, data []byte) error {
	if !pl.WritableIndex() {
		return abi.Errorf(syscall.EPERM, "write", "read-only index file")
	}
	name, err := index.ParseValue(data)
	if err != nil {
		return err
	}
	x, err := t.e.Index(pl.Container)
	if err != nil {
		return err
	}
	if pl.Kind == layout.PlaceIndexCurrent {
		return x.SetCurrent(name)
	}
	return x.SetEntry(pl.IndexKind, pl.Key, name)
}
