package sealedlog

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Single-value files (an index's current, its by-cwd entries) change at
// every send. Replacing one durably cost a file sync and a directory sync,
// under the index's lock, at every send: more than the send's own logs;
// replacing one at all (a new file, a rename) cost a third of a send's CPU
// with 16 clients. Through the journal a change is only a value record,
// durable at the journal's next commit (the one the send waits for next),
// and the file itself is written when its generation is checkpointed
// (then synced, before the records go), or by replay after a crash. So
// the store's file lags while the server runs: its owner must serve the
// value from memory (the index does: it reads its files only when it
// loads, after replay), and every change of such a file must go through
// the journal (PutValue, RemoveValue), or a checkpoint or replay could put
// back an older value. Callers serialise the changes of one file (the
// index does, under its lock).

// valueHeader is the owner a value record carries before the content:
// uid, gid, file mode (4 bytes each) and the directory mode (4 bytes).
const valueHeader = 16

// valueChange is the last change of one value file in a generation.
type valueChange struct {
	data   []byte
	own    storefs.Owner
	remove bool
}

// PutValue records that the file rel holds data, owned by own. Sync
// makes it durable.
func (j *Journal) PutValue(rel string, data []byte, own storefs.Owner) error {
	b := make([]byte, valueHeader+len(data))
	binary.LittleEndian.PutUint32(b[0:], uint32(int32(own.Uid)))
	binary.LittleEndian.PutUint32(b[4:], uint32(int32(own.Gid)))
	binary.LittleEndian.PutUint32(b[8:], uint32(own.FileMode))
	binary.LittleEndian.PutUint32(b[12:], uint32(own.DirMode))
	copy(b[valueHeader:], data)
	return j.queueValue(&jrec{kind: recValue, path: rel, data: b}, &valueChange{data: b[valueHeader:], own: own})
}

// RemoveValue records that the file rel is gone.
func (j *Journal) RemoveValue(rel string) error {
	return j.queueValue(&jrec{kind: recRemove, path: rel}, &valueChange{remove: true})
}

func (j *Journal) queueValue(r *jrec, c *valueChange) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return err
	}
	if err := j.reserve(unitRoom([]*jrec{r})); err != nil {
		return err
	}
	j.push([]*jrec{r})
	j.values[r.path] = c
	return nil
}

// writeValue puts one change into the store, without a sync.
func writeValue(root *storefs.Root, rel string, c *valueChange) error {
	var err error
	if c.remove {
		err = root.Remove(rel)
	} else {
		err = root.ReplaceFile(rel, c.data, c.own, storefs.NoSync)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // its directory went since (a session archived, an index dropped)
	case storefs.IsUnsafe(err):
		// Something planted there (a symlink) is never written through;
		// fsck names it. The index still holds the value.
		slog.Warn("journal: a value file is not a regular file; not written", "err", err)
		return nil
	}
	return err
}

// decodeValue splits a value record's data into owner and content.
func decodeValue(b []byte) (storefs.Owner, []byte, bool) {
	if len(b) < valueHeader {
		return storefs.Owner{}, nil, false
	}
	own := storefs.Owner{
		Uid:      int(int32(binary.LittleEndian.Uint32(b[0:]))),
		Gid:      int(int32(binary.LittleEndian.Uint32(b[4:]))),
		FileMode: os.FileMode(binary.LittleEndian.Uint32(b[8:])),
		DirMode:  os.FileMode(binary.LittleEndian.Uint32(b[12:])),
	}
	return own, b[valueHeader:], true
}

// syncValues writes the value files a generation changed and makes them
// durable under their names (their content, then their directories), so
// that the generation's records may go. A later generation's change of
// the same file is written at its own checkpoint.
func (j *Journal) syncValues(values map[string]*valueChange) error {
	dirs := map[string]struct{}{}
	for rel, c := range values {
		if err := writeValue(j.root, rel, c); err != nil {
			return err
		}
		dirs[path.Dir(rel)] = struct{}{}
		if c.remove {
			continue
		}
		f, err := j.root.OpenFile(rel, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) || storefs.IsUnsafe(err) {
			continue // gone since, or not ours to sync (fsck names it)
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncValueDir(j.root, d); err != nil {
			return err
		}
	}
	return nil
}

// syncValueDir syncs the directory of a value file. One gone since, or
// not a directory of ours (a planted link: never followed, fsck names
// it), has nothing of ours to sync.
func syncValueDir(root *storefs.Root, dir string) error {
	err := root.SyncDir(dir)
	if errors.Is(err, fs.ErrNotExist) || storefs.IsUnsafe(err) {
		return nil
	}
	return err
}

// replayValue is the last change a journal holds for one value file.
type replayValue struct {
	rel    string
	remove bool
	w      jwrite // where the record's data is
}

// applyValue writes a value file as its last record says, durably.
func (rp *replay) applyValue(v *replayValue) error {
	c := &valueChange{remove: v.remove}
	if !v.remove {
		b := make([]byte, v.w.n)
		if _, err := rp.files[v.w.gen].ReadAt(b, v.w.pos); err != nil {
			return err
		}
		own, data, ok := decodeValue(b)
		if !ok {
			return errBadRecord
		}
		c.data, c.own = data, own
	}
	if err := writeValue(rp.root, v.rel, c); err != nil {
		return err
	}
	if !v.remove {
		if f, err := rp.root.OpenFile(v.rel, os.O_RDONLY, 0); err == nil {
			err = f.Sync()
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return syncValueDir(rp.root, path.Dir(v.rel))
}
