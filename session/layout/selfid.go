package layout

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

// The index of self_ids of one home or space (meta.json's self_id, SPEC
// 14): which session holds each, so that two never do.

// ValidSelfID says whether s may be a session's self_id (meta.json):
// at most 32 of [a-z0-9_-].
func ValidSelfID(s string) bool {
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

// ClaimSelfID makes the session at rel, in home, the holder of id, or
// returns EEXIST when another session of the same home or space holds it.
// The caller serialises claims.
func ClaimSelfID(root *storefs.Root, home, rel, id string) error {
	if err := SelfIDFree(root, home, rel, id); err != nil {
		return err
	}
	return root.ReplaceFile(selfIDDir(home)+"/"+id, []byte(rel+"\n"), selfIDOwner, storefs.SyncAll)
}

// ReleaseSelfID takes id out of home's index of self_ids when it names
// the session at rel and that session no longer holds it (its meta.json
// names another, or none; it was archived or deleted, and no session
// made anew at its path took it since). Left
// there, each entry was a file of root's in the store that nothing
// removed, so one session that wrote meta.json with self_id after
// self_id, or sessions made, given a self_id and deleted in turn, made
// the server keep files without end. An entry naming another session is
// that session's. The caller serialises claims.
func ReleaseSelfID(root *storefs.Root, home, rel, id string) {
	if id == "" || !ValidSelfID(id) {
		return
	}
	name := selfIDDir(home) + "/" + id
	if b, err := root.ReadFile(name, MaxValueFile); err == nil && strings.TrimSuffix(string(b), "\n") == rel && !holdsSelfID(root, rel, id) {
		root.Remove(name)
	}
}

// SelfIDFree is EEXIST when a session of home other than the one at rel
// holds id (the index of self_ids is rebuilt first when missing). The
// caller serialises claims.
func SelfIDFree(root *storefs.Root, home, rel, id string) error {
	dir := selfIDDir(home)
	if _, err := root.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := rebuildSelfIDs(root, home, dir); err != nil {
			return err
		}
	}
	b, err := root.ReadFile(dir+"/"+id, MaxValueFile)
	if holder := strings.TrimSuffix(string(b), "\n"); err == nil && holder != rel && holdsSelfID(root, holder, id) {
		return abi.Errorf(syscall.EEXIST, "write meta.json", "self_id %q is taken by %s", id, path.Base(holder))
	}
	return nil
}

// holdsSelfID reports whether the session at rel has self_id id now.
func holdsSelfID(root *storefs.Root, rel, id string) bool {
	// An entry's value is never trusted blindly.
	return abi.ValidName(path.Base(rel)) && SessionSelfID(root, rel) == id
}

// SessionSelfID is the self_id the meta.json of the session at rel names
// in the store ("" for none, or none readable).
func SessionSelfID(root *storefs.Root, rel string) string {
	b, err := root.ReadFile(rel+"/"+abi.FileMeta, MaxValueFile)
	if err != nil {
		return ""
	}
	obj, err := proto.ParseObject(b, false)
	if err != nil {
		return ""
	}
	return obj.Str("self_id")
}

// rebuildSelfIDs scans every session of a home or space for self_ids.
func rebuildSelfIDs(root *storefs.Root, home, dir string) error {
	tmp := dir + ".rebuild"
	if err := root.RemoveAll(tmp); err != nil {
		return err
	}
	if err := root.MkdirOwned(tmp, selfIDOwner); err != nil {
		return err
	}
	for _, rel := range HomeSessionDirs(root, home, false) {
		b, err := root.ReadFile(rel+"/"+abi.FileMeta, MaxValueFile)
		if err != nil {
			continue
		}
		if obj, err := proto.ParseObject(b, false); err == nil && ValidSelfID(obj.Str("self_id")) && obj.Str("self_id") != "" {
			WriteNew(root, tmp+"/"+obj.Str("self_id"), []byte(rel+"\n"), selfIDOwner)
		}
	}
	return root.Rename(tmp, dir, 0)
}
