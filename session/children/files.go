package children

import (
	"errors"
	"os"
	"path"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
)

// The files of context/child/<run>/ (SPEC 18).
const (
	DirChild    = "child"
	fileAgent   = "agent"
	fileSession = "session"
	fileStatus  = "status"
	fileResult  = "result.md"
)

// Files is one parent session's context/child/: context/ is the
// session's free tree, the user's, so every write goes through the free
// trees' door as the session's owner (never as root, never following a
// link a user made) and replaces its file whole: written under a
// temporary name, then renamed over it.
type Files struct {
	Tree    freetree.Tree
	Caller  layout.Caller // the session's owner
	Session string        // the session's store-relative path
	Changed func(rel ...string)
	// Failed is told what could not be written (the user's quota is
	// full, a user put something else in the way): the run goes on.
	Failed func(rel string, err error)
}

// write replaces context/child/<child>/<name> with data. Nil-safe: a
// temp session has no files.
func (fs *Files) write(child, name, data string) {
	if fs == nil {
		return
	}
	top := path.Join(fs.Session, abi.DirContext)
	dir := path.Join(top, DirChild, child)
	rel, tmp := path.Join(dir, name), path.Join(dir, "."+name+".new")
	err := fs.Tree.MkdirAll(fs.Caller, top, dir, 0o750)
	if err == nil {
		err = fs.Tree.WriteFile(fs.Caller, tmp, []byte(data), 0o640)
	}
	if err == nil {
		if err = fs.Tree.Rename(fs.Caller, tmp, rel, 0); err != nil {
			fs.Tree.Remove(fs.Caller, tmp)
		}
	}
	if err != nil {
		if fs.Failed != nil {
			fs.Failed(rel, err)
		}
		return
	}
	fs.Changed(dir, rel)
}

// maxInterrupted bounds the children one parent's load closes: no more
// can have been pending or active at once than the runs their uid may
// hold (32 by default), and the rest of context/child/ is whatever its
// user made there: 3,000 directories made to look like running children
// held every start of the server 7 s (each one's files written, one
// durable event each), and a uid's inodes allow 100,000.
const maxInterrupted = 256

// Interrupted closes, after a restart, the children that the session's
// context/child/ still shows pending or active: the server that followed
// them stopped, and their own runs were interrupted with it (each
// session's load closes its run), so nothing would ever finish their
// files. Each becomes error (unless its own session's load came first and
// did: closedUnreported), gets an empty result.md, and a frame for the
// parent run's events says why; at most maxInterrupted of them (the
// others' own loads still close their status). Nil-safe.
func (fs *Files) Interrupted() []*proto.Object {
	if fs == nil {
		return nil
	}
	dir := path.Join(fs.Session, abi.DirContext, DirChild)
	ents, err := fs.Tree.ReadDir(dir)
	if err != nil {
		return nil
	}
	var frames []*proto.Object
	for _, ent := range ents {
		if len(frames) == maxInterrupted {
			break
		}
		if ent.IsDir() && (fs.Closed(ent.Name) || fs.closedUnreported(ent.Name)) {
			fs.write(ent.Name, fileResult, "") // reported: a later restart does not report it again
			frames = append(frames, proto.NewObject("type", FrameCancel, "child", ent.Name, "reason", "interrupted: the server stopped while the child ran"))
		}
	}
	return frames
}

// Closed marks the child run's end as error, after a restart, when its
// status still says pending or active (its run was interrupted: its own
// session closes it), and reports whether it did. Nil-safe.
func (fs *Files) Closed(run string) bool {
	if fs == nil || !abi.IsRunID(run) {
		return false
	}
	switch fs.read(path.Join(fs.Session, abi.DirContext, DirChild, run, fileStatus)) {
	case StatusPending + "\n", StatusActive + "\n":
		fs.write(run, fileStatus, StatusError+"\n")
		return true
	}
	return false
}

// closedUnreported reports whether a restart closed the child before
// its parent's session loaded (Closed from the child's own load): status
// error and no result.md, which a child that ended while followed always
// has (written before its status).
func (fs *Files) closedUnreported(run string) bool {
	dir := path.Join(fs.Session, abi.DirContext, DirChild, run)
	if fs.read(path.Join(dir, fileStatus)) != StatusError+"\n" {
		return false
	}
	_, err := fs.Tree.Lstat(path.Join(dir, fileResult))
	return errors.Is(err, os.ErrNotExist)
}

// ParentSession is the parent session's directory a child's start names
// (parent_session), when it is a session directory of the child's own
// home or space, else "".
func ParentSession(rel, home string) string {
	p := layout.Classify(rel)
	if rel == "" || p.Kind != layout.PlaceSession || p.Home != home || p.Ref().Rel() != rel {
		return ""
	}
	return rel
}

// read is a small file of the tree, as the session's owner ("" when it
// cannot be read).
func (fs *Files) read(rel string) string {
	f, err := fs.Tree.Open(fs.Caller, rel, os.O_RDONLY)
	if err != nil {
		return ""
	}
	defer f.OS().Close()
	b := make([]byte, 64)
	n, _ := f.OS().Read(b)
	return string(b[:n])
}
