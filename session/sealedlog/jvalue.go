package sealedlog

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Single-value files (an index's current, its by-cwd entries) change at
// every send. Replacing one durably cost a file sync and a directory sync,
// under the index's lock, at every send: more than the send's own logs.
// Through the journal a value is replaced without a sync and its new
// content goes into a value record, durable at the journal's next commit
// (the one the send waits for next); replay writes the last value of each
// file again, and a checkpoint syncs the files before their records go.
//
// Every change to such a file must go through the journal (PutValue,
// RemoveValue), or replay could put back an older value; callers
// serialise the changes of one file (the index does, under its lock).

// valueHeader is the owner a value record carries before the content:
// uid, gid, file mode (4 bytes each) and the directory mode (4 bytes).
const valueHeader = 16

// PutValue replaces the file rel with data, owned by own, atomically and
// without a sync, and queues its value record. Sync makes it durable.
func (j *Journal) PutValue(rel string, data []byte, own storefs.Owner) error {
	if err := j.root.ReplaceFile(rel, data, own, storefs.NoSync); err != nil {
		return err
	}
	b := make([]byte, valueHeader+len(data))
	binary.LittleEndian.PutUint32(b[0:], uint32(int32(own.Uid)))
	binary.LittleEndian.PutUint32(b[4:], uint32(int32(own.Gid)))
	binary.LittleEndian.PutUint32(b[8:], uint32(own.FileMode))
	binary.LittleEndian.PutUint32(b[12:], uint32(own.DirMode))
	copy(b[valueHeader:], data)
	return j.queueValue(&jrec{kind: recValue, path: rel, data: b})
}

// RemoveValue removes the file rel (one already gone is fine) and queues
// the removal's record.
func (j *Journal) RemoveValue(rel string) error {
	if err := j.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return j.queueValue(&jrec{kind: recRemove, path: rel})
}

func (j *Journal) queueValue(r *jrec) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return err
	}
	if err := j.reserve(unitRoom([]*jrec{r})); err != nil {
		return err
	}
	j.push([]*jrec{r})
	j.values[r.path] = struct{}{}
	return nil
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

// syncValues makes the value files a generation changed durable under
// their names (their content, then their directories), so that the
// generation's records may go.
func (j *Journal) syncValues(paths map[string]struct{}) error {
	dirs := map[string]struct{}{}
	for rel := range paths {
		f, err := j.root.OpenFile(rel, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) || storefs.IsUnsafe(err) {
			dirs[path.Dir(rel)] = struct{}{} // removed (or not ours to sync): its directory says so
			continue
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
		dirs[path.Dir(rel)] = struct{}{}
	}
	for d := range dirs {
		if err := j.root.SyncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// replayValue is the last change a journal holds for one value file.
type replayValue struct {
	rel    string
	remove bool
	w      jwrite // where the record's data is
}

// applyValue writes a value file as its last record says, durably.
func (rp *replay) applyValue(v *replayValue) error {
	if v.remove {
		err := rp.root.Remove(v.rel)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := rp.root.SyncDir(path.Dir(v.rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b := make([]byte, v.w.n)
	if _, err := rp.files[v.w.gen].ReadAt(b, v.w.pos); err != nil {
		return err
	}
	own, data, ok := decodeValue(b)
	if !ok {
		return errBadRecord
	}
	err := rp.root.ReplaceFile(v.rel, data, own, storefs.SyncAll)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // its directory went since (a session archived, an index dropped)
	}
	return err
}
