// Package archive owns how a session leaves the live tree in the store
// (SPEC 12): where an agent session is archived (Target), the move there
// (Move: one rename that never replaces anything, made durable), a
// deletion a crash never leaves half in view (Remove; RemoveArchived for
// an archived session), and which sessions the server's own clean-up
// takes (EachIdle).
//
// It decides no protection: the engine checks that a session is not
// protected (index, default, current, active, running, a derived value
// waiting) and takes it out of use before it calls Move or Remove. It
// must never load a session, touch an index, or import the engine, fs,
// server or cmd.
package archive

import (
	"crypto/rand"
	"encoding/hex"
	"path"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Target is where an agent session is archived: the home's
// archived_sessions/<agent>/<session>.
func Target(r layout.Ref) string {
	return path.Join(r.Home, abi.ArchivedDir, r.Owner, r.Name)
}

// Move renames the session's directory to its archive target, never over
// anything (EEXIST), and makes the move durable. own owns the archive's
// directories made on the way. left says the session left its place,
// whatever failed after (a sync): the caller must take it out of the
// index all the same.
func Move(root *storefs.Root, r layout.Ref, own storefs.Owner) (left bool, err error) {
	target := Target(r)
	if err := layout.MkdirAll(root, path.Dir(target), own); err != nil {
		return false, err
	}
	if err := root.Move(r.Rel(), target); err != nil {
		return false, err
	}
	if err := root.SyncDir(path.Dir(target)); err != nil {
		return true, err
	}
	return true, root.SyncDir(r.Container.Rel())
}

// Remove deletes the session's directory: first renamed aside to a
// hidden leftover name (layout.DelDirPrefix), which load and fsck
// --repair finish removing should this be interrupted. left is Move's.
func Remove(root *storefs.Root, r layout.Ref) (left bool, err error) {
	return removeAside(root, r.Container.Rel(), r.Name, nil)
}

// RemoveArchived deletes the archived session r (at Target(r)) as Remove
// deletes a live one, aside in its archive directory: the uid's first
// count of history after a start (the engine's) and fsck --repair finish
// removing a leftover. moved is called with the hidden name once the
// session is there and before anything of it is removed, when no one
// else can reach it: what it holds is counted there.
func RemoveArchived(root *storefs.Root, r layout.Ref, moved func(aside string)) (left bool, err error) {
	return removeAside(root, path.Dir(Target(r)), r.Name, moved)
}

// removeAside removes the directory dir/name, renamed aside first to
// dir/.del-<name>-<16 hex>; moved (nil: none) is called with that name
// once it is there.
func removeAside(root *storefs.Root, dir, name string, moved func(aside string)) (left bool, err error) {
	var b [8]byte
	rand.Read(b[:])
	aside := path.Join(dir, layout.DelDirPrefix+name+"-"+hex.EncodeToString(b[:]))
	if err := root.Move(path.Join(dir, name), aside); err != nil {
		return false, err
	}
	if moved != nil {
		moved(aside)
	}
	if err := root.SyncDir(dir); err != nil {
		return true, err
	}
	return true, root.RemoveAll(aside)
}

// IdlePattern is what the server's own clean-up takes: Agenvoy-style
// temporary sessions, by name.
const IdlePattern = "temp-*"

// Idle is a session the server's clean-up may archive: its place, its
// store path, and the owner of its home's archive directories.
type Idle struct {
	Ref layout.Ref
	Rel string
	Own storefs.Owner
}

// EachIdle calls archive for every agent session in a home (archives
// live in homes, SPEC 2) whose name matches IdlePattern and whose
// updated_at (updatedAt, Unix seconds) is not after cutoff, one after the
// other, as the homes are walked.
func EachIdle(root *storefs.Root, cutoff int64, updatedAt func(rel string) int64, archive func(Idle)) {
	for _, home := range layout.Homes(root) {
		uid, ok := layout.HomeUid(home)
		if !ok {
			continue // archives live in homes (SPEC 2)
		}
		own := layout.PrivateOwner(uid, storefs.PrimaryGid(uid))
		for _, rel := range layout.HomeSessionDirs(root, home, false) {
			ct, name, ok := layout.ParseContainerRel(rel)
			if m, _ := path.Match(IdlePattern, name); !ok || !m || ct.Kind != abi.KindAgent {
				continue
			}
			if u := updatedAt(rel + "/" + abi.FileUpdatedAt); u == 0 || u > cutoff {
				continue // 0: unread, or none; nothing says it is idle
			}
			archive(Idle{Ref: layout.Ref{Container: ct, Name: name}, Rel: rel, Own: own})
		}
	}
}
