package session

import (
	"bytes"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/filestamp"
	"github.com/ctxfs/ctxfs/proto"
)

// metaRacy: a meta.json changed less than this long before it was read
// is not kept (filestamp.RacyWindow; a variable for the tests).
var metaRacy = filestamp.RacyWindow

// metaSeen is a session's meta.json as it was last read and parsed, by
// the stamp of the store file it was read from, as fstat saw it (one
// file's at a time: the zero filestamp.Memo). Every model run reads the
// file's rule, and a cli run its cli_session: a stat that finds the same
// file costs a third of reading and parsing it again (docs/
// benchmarks.md, "meta.json at every run"). The engine replaces
// meta.json whole (a new inode); root may edit it in place, which moves
// its size or its ctime. A parse kept is never changed.
type metaSeen = filestamp.Memo[filestamp.Stamp, *proto.Object]

// metaString is meta.json's string key, "" when there is none or the
// file cannot be read.
func (s *sess) metaString(key string) string {
	obj, err := s.metaKept()
	if err != nil {
		return ""
	}
	return obj.Str(key)
}

// metaKept is meta.json as the store holds it now, to read only: the one
// kept when the store file is the one it was read from, else read again
// (and kept unless it changed within metaRacy).
func (s *sess) metaKept() (*proto.Object, error) {
	if s.rel == "" {
		return nil, unix.ENOENT
	}
	rel := s.file(abi.FileMeta)
	if st, err := s.e.root.Lstat(rel); err == nil {
		if obj, ok := s.meta.Get(filestamp.Of(st)); ok {
			return obj, nil
		}
	}
	obj, stamp, err := s.readMeta(rel)
	s.meta.Clear() // what was kept of another file
	if err != nil {
		return nil, err
	}
	s.meta.Keep(stamp, obj, metaRacy, stamp)
	return obj, nil
}

// metaObject is meta.json read and parsed afresh, the caller's to change.
func (s *sess) metaObject() (*proto.Object, error) {
	if s.rel == "" {
		return nil, unix.ENOENT
	}
	obj, _, err := s.readMeta(s.file(abi.FileMeta))
	return obj, err
}

// readMeta reads and parses the store's meta.json at rel, and says what
// file it read.
func (s *sess) readMeta(rel string) (*proto.Object, filestamp.Stamp, error) {
	b, st, err := s.e.root.ReadFileStat(rel, maxRulesBytes)
	if err != nil {
		return nil, filestamp.Stamp{}, err
	}
	obj, err := proto.ParseObject(bytes.TrimSpace(b), false)
	if err != nil {
		return nil, filestamp.Stamp{}, err
	}
	return obj, filestamp.Of(st), nil
}
