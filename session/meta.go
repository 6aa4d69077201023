package session

import (
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
)

// writeMeta replaces meta.json (SPEC sections 5 and 14): one JSON object
// without duplicate keys; scope present and unchanged; model, when set, is
// "provider/model" (or "" for automatic); self_id is stored lowercase, at
// most 32 of [a-z0-9_-], and unique among the sessions of one home or
// space (EEXIST).
func (e *Engine) writeMeta(s *sess, data []byte) error {
	obj, err := proto.ParseObject(data, true)
	if err != nil {
		return &abi.Error{Op: "write meta.json", Errno: syscall.EINVAL, Msg: err.Error()}
	}
	if scope, ok := obj.String("scope"); !ok || scope != s.scope {
		return abi.Errorf(syscall.EINVAL, "write meta.json", "scope must stay %q", s.scope)
	}
	if raw := obj.Raw("model"); raw != nil {
		m, ok := obj.String("model")
		if !ok || (m != "" && !abi.ValidModelName(m)) {
			return abi.Errorf(syscall.EINVAL, "write meta.json", "model must be \"provider/model\"")
		}
	}
	for _, k := range []string{"name", "rule", "reasoning", "client"} {
		if raw := obj.Raw(k); raw != nil {
			if _, ok := obj.String(k); !ok {
				return abi.Errorf(syscall.EINVAL, "write meta.json", "%s must be a string", k)
			}
		}
	}
	selfID := ""
	if raw := obj.Raw("self_id"); raw != nil {
		v, ok := obj.String("self_id")
		if !ok || !validSelfID(strings.ToLower(v)) {
			return abi.Errorf(syscall.EINVAL, "write meta.json", "self_id must be at most 32 of [a-z0-9_-]")
		}
		selfID = strings.ToLower(v)
		obj.Set("self_id", selfID)
	}
	// Stored as written (plus a final newline), unless self_id had to be
	// lowered: then the object is re-encoded, its keys in order.
	out := append(bytesTrimNL(data), '\n')
	if selfID != "" {
		out = obj.Line()
	}
	s.e.selfMu.Lock()
	defer s.e.selfMu.Unlock()
	if selfID != "" {
		if err := s.e.claimSelfID(s, selfID); err != nil {
			return err
		}
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := s.e.writeValue(s.file(abi.FileMeta), out, s.own); err != nil {
		return err
	}
	s.e.changed(s.ref.Rel() + "/" + abi.FileMeta)
	return nil
}

func bytesTrimNL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return append([]byte(nil), b...)
}

func validSelfID(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// selfIDDir is the derived index of self_ids in one home or space: one file
// per self_id naming the session (store-relative) that holds it. It is
// checked against the session's meta.json on every use, so a stale entry
// (a session archived, or its self_id changed) never blocks anyone, and it
// is rebuilt by scanning when missing. It is the server's own (root,
// 0700/0600) and never history.
func selfIDDir(home string) string { return home + "/.self_id" }

// selfIDOwner owns the self_id index.
var selfIDOwner = storefs.Owner{Uid: 0, Gid: 0, DirMode: 0o700, FileMode: 0o600}

// claimSelfID makes s the holder of id, or returns EEXIST when another
// session of the same home or space holds it. Caller holds e.selfMu.
func (e *Engine) claimSelfID(s *sess, id string) error {
	dir := selfIDDir(s.ref.Home)
	if _, err := e.root.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := e.rebuildSelfIDs(s.ref.Home, dir); err != nil {
			return err
		}
	}
	entry := dir + "/" + id
	if holder, err := e.readValue(entry); err == nil && holder != s.ref.Rel() && e.holdsSelfID(holder, id) {
		return abi.Errorf(syscall.EEXIST, "write meta.json", "self_id %q is taken by %s", id, path.Base(holder))
	}
	return e.writeValue(entry, []byte(s.ref.Rel()+"\n"), selfIDOwner)
}

// holdsSelfID reports whether the session at rel has self_id id now.
func (e *Engine) holdsSelfID(rel, id string) bool {
	if !abi.ValidName(path.Base(rel)) { // an entry's value is never trusted blindly
		return false
	}
	b, err := e.root.ReadFile(rel+"/"+abi.FileMeta, maxValueFile)
	if err != nil {
		return false
	}
	obj, err := proto.ParseObject(b, false)
	return err == nil && obj.Str("self_id") == id
}

// rebuildSelfIDs scans every session of a home or space for self_ids.
func (e *Engine) rebuildSelfIDs(home, dir string) error {
	tmp := dir + ".rebuild"
	if err := e.root.RemoveAll(tmp); err != nil {
		return err
	}
	if err := e.root.MkdirOwned(tmp, selfIDOwner); err != nil {
		return err
	}
	for _, rel := range sessionDirs(e.root, home, false) {
		b, err := e.root.ReadFile(rel+"/"+abi.FileMeta, maxValueFile)
		if err != nil {
			continue
		}
		if obj, err := proto.ParseObject(b, false); err == nil && validSelfID(obj.Str("self_id")) && obj.Str("self_id") != "" {
			e.writeNew(tmp+"/"+obj.Str("self_id"), []byte(rel+"\n"), selfIDOwner)
		}
	}
	return e.root.Rename(tmp, dir, 0)
}
