package session

import (
	"bytes"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// CreateSession makes a new session directory with the initial layout
// (mkdir session/<name> through the mount). EEXIST if it exists, EINVAL for
// a bad name. Its cwd is the agent's default cwd, else "/".
func (e *Engine) CreateSession(c layout.Caller, r layout.Ref) error {
	if !abi.ValidSessionName(r.Name) || !r.Container.Valid() {
		return abi.Errorf(syscall.EINVAL, "mkdir", "invalid session name %q", r.Name)
	}
	if e.sessionExists(r) {
		return &abi.Error{Op: "mkdir", Path: r.Name, Errno: syscall.EEXIST}
	}
	loc, err := e.locateRef(c, r)
	if err != nil {
		return err
	}
	cwd := "/"
	if defn, err := e.definition(r.Container); err == nil && defn.Cwd != "" {
		cwd = defn.Cwd
	}
	if err := e.createDir(r, loc.own, cwd); err != nil {
		return err
	}
	if x, err := e.Index(r.Container); err == nil {
		x.Add(r.Name)
	}
	e.changed(r.Container.Rel())
	return nil
}

// AppendLog appends whole lines (each ending in "\n") to messages.jsonl or
// events.jsonl, as a writer through the mount does: ordered and visible to
// readers when it returns, durable at SyncLog (SPEC 6: a write returns
// before its data is durable, fsync and the last close wait). EINVAL
// (nothing written) when any line is invalid, EIO when the log is
// unprovable, EPERM for any other file. An assistant message updates
// latest.md; every append updates updated_at and the index. The append is
// announced as Written: the caller is answering the writer's FUSE WRITE.
// Each line is stored with the writer's uid (abi.StampWriter), so it may not
// carry another; and no line of events.jsonl may be one of the records
// the server alone writes (abi.CheckNoHostRecord): a restart rebuilds
// from them what a run waits for, and as whom it goes on.
func (e *Engine) AppendLog(c layout.Caller, r layout.Ref, file string, lines []byte) error {
	return e.appendLog(c, r, file, lines, Written)
}

// AppendRelayed is AppendLog for lines another host's mount took (a
// writer there, relayed to this host, which writes the store): no kernel
// here sent a WRITE for them, so the append is announced as Changed and
// this host's mount marks what its kernel holds of the log stale, as it
// does for a run's lines. Announced as Written, a reader here that had
// the log cached kept its old size for the mount's attribute timeout.
func (e *Engine) AppendRelayed(c layout.Caller, r layout.Ref, file string, lines []byte) error {
	return e.appendLog(c, r, file, lines, Changed)
}

func (e *Engine) appendLog(c layout.Caller, r layout.Ref, file string, lines []byte, how Change) error {
	lines, err := abi.StampWriter(lines, c.Uid)
	if err != nil {
		return err
	}
	if file == abi.FileEvents {
		if err := abi.CheckNoHostRecord(lines); err != nil {
			return err
		}
	}
	s, l, release, err := e.lookupLog(r, file)
	if err != nil {
		return err
	}
	defer release()
	// A session's two logs are one history: damage in either refuses
	// appends to both, as it refuses sends.
	if err := s.readyToAppend(l); err != nil {
		return err
	}
	if err := l.Write(lines); err != nil {
		return err
	}
	if file == abi.FileMessages {
		if last := proto.LastOfRole(lines, "assistant"); last != nil {
			s.writeLatest(last) // latest.md: the last answer among the lines
		}
	}
	s.touch(time.Now(), "")
	e.changedBy(how, s.file(file))
	return nil
}

// SyncLog returns once everything appended to a log so far is durable
// (fsync, fdatasync or close of a writer through the mount).
func (e *Engine) SyncLog(r layout.Ref, file string) error {
	_, l, release, err := e.lookupLog(r, file)
	if err != nil {
		return err
	}
	defer release()
	return l.Sync()
}

// lookupLog finds a session and its log of that name (EPERM for any other
// file); release lets the session go.
func (e *Engine) lookupLog(r layout.Ref, file string) (*sess, *sealedlog.Log, func(), error) {
	s, release, err := e.lookup(r)
	if err != nil {
		return nil, nil, nil, err
	}
	switch file {
	case abi.FileEvents:
		return s, s.events, release, nil
	case abi.FileMessages:
		return s, s.msgs, release, nil
	}
	release()
	return nil, nil, nil, &abi.Error{Op: "append", Path: file, Errno: syscall.EPERM, Msg: "not a log"}
}

// Lost is why bytes written to a log through the mount were not recorded.
type Lost struct {
	Errno syscall.Errno
	Why   string
}

// Losses a writer through the mount can suffer.
var (
	// LostPartial: the last descriptor was closed before the line's newline.
	LostPartial = Lost{syscall.EINVAL, "partial line discarded: the writer closed the file before its newline"}
)

// RecordLoss records, as an error event with the loss's errno, that n
// bytes a writer sent to file through the mount were dropped (an
// unfinished line at the last close, a refused line), with the file, the
// byte count and the writer: the loss is never silent. A full disk may
// keep even this from being recorded; the writer's close still fails.
func (e *Engine) RecordLoss(c layout.Caller, r layout.Ref, file string, n int, lost Lost) {
	s, release, err := e.lookup(r)
	if err != nil {
		return
	}
	defer release()
	ev := proto.NewObject("type", proto.FrameError, "code", abi.ErrnoName(lost.Errno), "message", lost.Why,
		"file", file, "bytes", n, "pid", c.Pid, "uid", c.Uid, "ts", abi.TS(time.Now()))
	if s.ready() == nil && s.appendEvents(ev) == nil {
		s.touch(time.Now(), "")
		e.changed(r.Rel() + "/" + abi.FileEvents)
	}
}

// WriteFile replaces a writable single-value file (state, cwd) or meta.json
// whole, after validating the new value (a missing final newline is added).
// EINVAL for an invalid value, EEXIST for a self_id taken, EPERM for a file
// that is not writable. The old value stays on any error.
func (e *Engine) WriteFile(c layout.Caller, r layout.Ref, file string, data []byte) error {
	s, release, err := e.lookup(r)
	if err != nil {
		return err
	}
	defer release()
	if s.rel == "" {
		return &abi.Error{Op: "write", Path: file, Errno: syscall.EPERM}
	}
	value := string(bytes.TrimSuffix(data, []byte("\n")))
	switch file {
	case abi.FileState:
		if !abi.ValidState(value) {
			return abi.Errorf(syscall.EINVAL, "write state", "%q is not a state", value)
		}
		ev := proto.NewObject("type", proto.FrameState, "state", value, "uid", c.Uid, "pid", c.Pid, "ts", abi.TS(time.Now()))
		if err := s.ready(); err != nil {
			return err
		}
		if err := s.appendEvents(ev); err != nil {
			return err
		}
		if err := s.writeFileDurably(abi.FileState, value+"\n"); err != nil {
			return err
		}
	case abi.FileCwd:
		if strings.Contains(value, "\n") {
			return abi.Errorf(syscall.EINVAL, "write cwd", "one line only")
		}
		if err := abi.CheckCwd(value); err != nil {
			return err
		}
		if err := s.writeFileDurably(abi.FileCwd, value+"\n"); err != nil {
			return err
		}
		s.fileMu.Lock()
		s.cwd = value
		s.fileMu.Unlock()
	case abi.FileMeta:
		return e.writeMeta(s, data)
	default:
		return &abi.Error{Op: "write", Path: file, Errno: syscall.EPERM, Msg: "read-only file"}
	}
	s.touch(time.Now(), "")
	return nil
}

// mkdirHome is mkdir of home (home/<uid>, SPEC 2): a uid's own home, or
// any uid's home for root (to prepare an agent's root/ before the user's
// first send); it belongs to that uid either way. EEXIST when it exists.
func (e *Engine) mkdirHome(c layout.Caller, home string) error {
	uid, ok := layout.HomeUid(home)
	switch {
	case !ok:
		return &abi.Error{Op: "mkdir", Path: home, Errno: syscall.EINVAL, Msg: "a home is named by a uid"}
	case c.Uid != 0 && uid != c.Uid:
		return &abi.Error{Op: "mkdir", Path: home, Errno: syscall.EACCES, Msg: "only root creates another uid's home"}
	case e.isDir(layout.PrivateHome(uid)):
		return syscall.EEXIST
	}
	return e.EnsureHome(uid)
}

// mkdirSpace is mkdir of a shared space (shared/<space>): root's alone.
func (e *Engine) mkdirSpace(c layout.Caller, home string) error {
	if c.Uid != 0 {
		return &abi.Error{Op: "mkdir", Path: home, Errno: syscall.EPERM, Msg: "only root creates shared spaces"}
	}
	return e.AddSpace(strings.TrimPrefix(home, "shared/"), -1, 0o770|os.ModeSetgid)
}

// mkdirArchive makes the home's archive or an agent's place in it (rel,
// layout.ArchiveDir): where a session is renamed to be archived (SPEC 12).
// The caller's right to the home is asked before the agent's name.
func (e *Engine) mkdirArchive(c layout.Caller, home, agent, rel string) error {
	own, err := e.homeOwner(c, home)
	if err != nil {
		return err
	}
	switch {
	case agent == "":
	case !abi.ValidName(agent):
		return &abi.Error{Op: "mkdir", Path: rel, Errno: syscall.EINVAL, Msg: "invalid agent name"}
	case !e.isDir(path.Join(home, abi.KindAgent, agent)) && !e.isDir(rel):
		// Only an agent of the home has sessions to archive: any other
		// name was an empty directory of root's store a user made
		// without end (the agents' bound counts the home's agents).
		return &abi.Error{Op: "mkdir", Path: rel, Errno: syscall.ENOENT, Msg: "no agent " + agent + " in this home to archive sessions of"}
	}
	return e.mkdirNew(own, rel)
}

// Rmdir removes rel through the mount: an empty directory of the archive
// (layout.ArchiveDir), which mkdir lets its home's user make, may go again,
// so that an archive refused after ctx made its target's directory (EBUSY:
// a protected session) leaves nothing behind; every other directory of
// the ABI is the tree's rule (ENOTEMPTY, else EPERM).
func (e *Engine) Rmdir(c layout.Caller, rel string) error {
	home, _, ok := layout.ArchiveDir(rel)
	if !ok {
		return e.Tree.Rmdir(c, rel)
	}
	if _, err := e.homeOwner(c, home); err != nil {
		return err
	}
	if err := e.root.RemoveDir(rel); err != nil {
		return err // ENOTEMPTY for one that holds an archive: the filesystem's own check
	}
	e.changed(rel, path.Dir(rel))
	return nil
}

// mkdirInHome makes a structural directory below a home or space (place
// pl at rel) with the directories that belong inside it:
// <home>/agent/<name> (and its session/, and in a private home its
// root/), <home>/model/<provider>, <home>/model/<provider>/<model>.d (and
// its session/). The directory is owned like its home. The directories
// the engine makes itself (session/, index/, root/, context/) are EPERM,
// once the caller may use the home.
func (e *Engine) mkdirInHome(c layout.Caller, pl layout.Place, rel string) error {
	own, err := e.homeOwner(c, pl.Home)
	if err != nil {
		return err
	}
	switch pl.Kind {
	case layout.PlaceAgents, layout.PlaceModels:
		return e.mkdirNew(own, rel)
	case layout.PlaceProvider:
		if err := e.providerDefined(path.Base(rel)); err != nil {
			return err
		}
		return e.mkdirNew(own, rel)
	case layout.PlaceAgent:
		inside := []string{rel + "/session"}
		if _, private := layout.HomeUid(pl.Home); private {
			// Only a private home's agent has a root/: a shared session
			// runs in its member's (Container.ChrootRel), and one made in
			// a space is a name the store does not hold there (fsck).
			inside = append(inside, rel+"/root")
		}
		return e.makeAgent(pl.Home, rel, func() error { return e.mkdirNew(own, rel, inside...) })
	case layout.PlaceModel:
		return e.makeAgent(pl.Home, rel, func() error { return e.mkdirNew(own, rel, rel+"/session") })
	}
	return notMade(rel)
}

// providerDefined is ENOENT unless the root defines the model provider
// p (a directory ROOT/model/p/, or debug, built in): a provider's
// directory holds no session itself, so it was charged to no bound, and
// a user's mkdir of every name made root's store keep inodes, and the
// mount listings, without end. A model's directory is charged (agents).
func (e *Engine) providerDefined(p string) error {
	if p == path.Dir(def.EchoModel) {
		return nil
	}
	if st, err := os.Stat(path.Join(e.cfg.Root, abi.KindModel, p)); err != nil || !st.IsDir() {
		return &abi.Error{Op: "mkdir", Path: p, Errno: syscall.ENOENT, Msg: "no model provider " + p + " is defined (ctx agent list shows the models)"}
	}
	return nil
}

// notMade is mkdir's answer for a directory of the ABI no one makes
// through the mount.
func notMade(rel string) error {
	return &abi.Error{Op: "mkdir", Path: rel, Errno: syscall.EPERM, Msg: "not a name the ABI allows here"}
}

// mkdirNew creates rel (EEXIST if it exists) and then the extra
// directories that belong inside it.
func (e *Engine) mkdirNew(own storefs.Owner, rel string, extra ...string) error {
	if _, err := e.root.Lstat(rel); err == nil {
		return &abi.Error{Op: "mkdir", Path: rel, Errno: syscall.EEXIST}
	}
	for _, d := range append([]string{rel}, extra...) {
		if err := layout.MkdirAll(e.root, d, own); err != nil {
			return err
		}
	}
	e.changed(path.Dir(rel))
	return nil
}

// homeOwner is who owns new directories in a home or space the caller may
// write to.
func (e *Engine) homeOwner(c layout.Caller, home string) (storefs.Owner, error) {
	if strings.HasPrefix(home, "shared/") {
		st, err := e.spaceAccess(c, strings.TrimPrefix(home, "shared/"))
		if err != nil {
			return storefs.Owner{}, err
		}
		return layout.SharedOwner(c.Uid, st.Gid), nil
	}
	loc, err := e.locateRef(c, layout.Ref{Container: layout.Container{Home: home}})
	if err != nil {
		return storefs.Owner{}, err
	}
	return loc.own, nil
}

// AddSpace creates the shared space name (layout.AddSpace) and tells the
// mount that shared/ changed.
func (e *Engine) AddSpace(name string, gid int, mode os.FileMode) error {
	err := layout.AddSpace(e.root, name, gid, mode)
	e.changed("shared")
	return err
}
