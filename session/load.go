package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// sealDir holds the seals of a session's logs. Its name starts with a dot:
// the FUSE projection never shows dot names.
const sealDir = ".seal"

func sealPath(dir, file string) string { return filepath.Join(dir, sealDir, file) }

// runSlots is the most runs one session runs at once; more wait in a queue.
var runSlots = runtime.NumCPU() * 4

func (r Ref) key() string {
	if r.Temp {
		return "temp:" + r.Home + ":" + r.Kind + ":" + r.Owner + ":" + r.Name
	}
	return r.Rel()
}

func scopeOfHome(home string) string {
	if strings.HasPrefix(home, "shared/") {
		return abi.ScopeShared
	}
	return abi.ScopePrivate
}

// lookup returns the loaded session r, loading it from the store if it
// exists. ENOENT when it does not.
func (e *Engine) lookup(r Ref) (*sess, error) {
	if r.Temp {
		if s, ok := e.sessions.peek(r.key()); ok {
			return s, nil
		}
		return nil, &abi.Error{Errno: syscall.ENOENT, Msg: "no temp session " + r.Name}
	}
	return e.sessions.get(r.key(), func() (*sess, error) { return e.load(r) })
}

// lookupOrCreate is lookup that first creates the session (atomically, with
// the initial layout) when it does not exist.
func (e *Engine) lookupOrCreate(r Ref, own owner, cwd string) (*sess, error) {
	if s, err := e.lookup(r); err == nil || !errors.Is(err, syscall.ENOENT) {
		return s, err
	}
	if r.Temp {
		return e.createTemp(r, cwd), nil
	}
	if err := e.createDir(r, own, cwd); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	s, err := e.lookup(r)
	if err == nil {
		if x, xerr := e.Index(r.Container); xerr == nil {
			x.Add(r.Name)
		}
		e.changed(r.Container.Rel())
	}
	return s, err
}

func newSess(e *Engine, r Ref) *sess {
	return &sess{e: e, ref: r, clients: map[string]*clientRecord{}, active: map[string]*run{}, slots: make(chan struct{}, runSlots)}
}

func (e *Engine) createTemp(r Ref, cwd string) *sess {
	s := newSess(e, r)
	s.scope, s.cwd = abi.ScopeTemp, cwd
	s.msgs, s.events = sealedlog.NewMemory(), sealedlog.NewMemory()
	return e.sessions.putIfAbsent(r.key(), s)
}

// load reads a session directory: opens and verifies its logs, learns
// its client ids, and closes runs that a crash interrupted.
func (e *Engine) load(r Ref) (*sess, error) {
	dir := e.path(r.Rel())
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, &abi.Error{Op: "session", Path: r.Name, Errno: abi.Errno(err), Msg: "no such session"}
	}
	if !st.IsDir() {
		return nil, &abi.Error{Op: "session", Path: r.Name, Errno: syscall.ENOTDIR}
	}
	s := newSess(e, r)
	s.dir = dir
	sys := st.Sys().(*syscall.Stat_t)
	s.own = owner{int(sys.Uid), int(sys.Gid), st.Mode().Perm(), st.Mode().Perm() &^ 0o111}
	s.scope = scopeOfHome(r.Home)
	s.updatedAt = readUnix(filepath.Join(dir, abi.FileUpdatedAt))
	s.cwd, _ = readValue(filepath.Join(dir, abi.FileCwd))
	if s.events, err = sealedlog.Open(filepath.Join(dir, abi.FileEvents), sealPath(dir, abi.FileEvents)); err != nil {
		return nil, err
	}
	if s.msgs, err = sealedlog.Open(filepath.Join(dir, abi.FileMessages), sealPath(dir, abi.FileMessages)); err != nil {
		s.events.Close()
		return nil, err
	}
	if s.provable() != nil {
		return s, nil // kept for reading and for refusing with EIO
	}
	unfinished, last, err := s.rebuildClients()
	if err != nil {
		return nil, err
	}
	s.reconcile(last)
	for _, rec := range unfinished {
		s.closeInterruptedRun(rec)
	}
	return s, nil
}

// createDir makes the session directory with its initial layout in a
// hidden temporary directory beside it, then renames it into place with
// RENAME_NOREPLACE, so that a crash never leaves a half-made session.
func (e *Engine) createDir(r Ref, own owner, cwd string) error {
	container := e.path(r.Container.Rel())
	if err := own.mkdirAll(e.cfg.Store, container); err != nil {
		return err
	}
	if _, err := e.Index(r.Container); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(container, ".new-"+r.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := e.layout(tmp, own, scopeOfHome(r.Home), cwd); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, e.path(r.Rel()), unix.RENAME_NOREPLACE); err != nil {
		return &abi.Error{Op: "create session", Path: r.Name, Errno: err.(syscall.Errno)}
	}
	return syncDir(container)
}

// layout writes a new session's files into dir (SPEC section 5). dir is a
// hidden directory that createDir renames into place afterwards, so the
// files need no atomic replacement, only to be durable before the rename;
// they are written and synced in parallel (a file creation costs
// milliseconds on this kind of machine, and concurrent syncs share journal
// commits).
func (e *Engine) layout(dir string, own owner, scope, cwd string) error {
	if err := os.Chmod(dir, own.dirMode); err != nil {
		return err
	}
	if err := own.chown(dir); err != nil {
		return err
	}
	for _, d := range []string{abi.DirContext, sealDir} {
		if err := own.mkdirAll(dir, filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	now := strconv.FormatInt(time.Now().Unix(), 10) + "\n"
	values := map[string]string{
		abi.FileLatest: "", abi.FileState: abi.StateIdle + "\n", abi.FileCwd: cwd + "\n",
		abi.FileCreatedAt: now, abi.FileUpdatedAt: now,
		abi.FileMeta: string(proto.NewObject("client", "ctx", "scope", scope).Line()),
	}
	var jobs []func() error
	for _, f := range []string{abi.FileMessages, abi.FileEvents} {
		jobs = append(jobs, func() error { return createLog(dir, f, own) })
	}
	for name, v := range values {
		jobs = append(jobs, func() error { return own.writeNew(filepath.Join(dir, name), []byte(v)) })
	}
	if err := parallel(jobs); err != nil {
		return err
	}
	return syncDir(dir)
}

// createLog creates an empty sealed log and gives it and its seal the
// owner's mode (sealedlog creates them 0600; a shared space's are
// group-writable).
func createLog(dir, f string, own owner) error {
	l, err := sealedlog.Create(filepath.Join(dir, f), sealPath(dir, f), own.uid, own.gid)
	if err != nil {
		return err
	}
	l.Close()
	for _, p := range []string{filepath.Join(dir, f), sealPath(dir, f)} {
		if err := os.Chmod(p, own.fileMode); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs jobs at once and returns the first error.
func parallel(jobs []func() error) error {
	errs := make(chan error, len(jobs))
	for _, job := range jobs {
		go func() { errs <- job() }()
	}
	var first error
	for range jobs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Index returns the index of a container, loading it on first use. The FUSE
// layer serves index/list from Index.ListBytes and writes current, by-hash
// and by-uuid through Index.SetCurrent, SetEntry and RemoveEntry.
func (e *Engine) Index(ct Container) (*index.Index, error) {
	if !ct.valid() || ct.Home == "" {
		return nil, abi.Errorf(syscall.EINVAL, "index", "invalid container %+v", ct)
	}
	rel := ct.Rel()
	return e.indexes.get(rel, func() (*index.Index, error) {
		dir := e.path(rel)
		st, err := os.Stat(dir)
		if err != nil {
			return nil, &abi.Error{Op: "index", Path: rel, Errno: abi.Errno(err)}
		}
		sys := st.Sys().(*syscall.Stat_t)
		return index.Load(dir, int(sys.Uid), int(sys.Gid))
	})
}

// SessionExists reports whether r names an existing session directory.
func (e *Engine) SessionExists(r Ref) bool {
	if r.Temp {
		_, ok := e.sessions.peek(r.key())
		return ok
	}
	st, err := os.Lstat(e.path(r.Rel()))
	return err == nil && st.IsDir()
}

// definition loads the agent or model a container belongs to.
func (e *Engine) definition(ct Container) (*agent.Definition, error) {
	def, err := agent.Load(e.cfg.Root, ct.Kind, ct.Owner)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ct.Kind, ct.Owner, err)
	}
	return def, nil
}
