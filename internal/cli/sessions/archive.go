package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// defaultGCPatterns are the candidates of a gc without --pattern (SPEC 12).
var defaultGCPatterns = []string{"*smoke*", "e2e-*", "repro-*", "install-*", "deterministic-*", "ansi-*", "spark-*", "temp-*"}

// gcJob is what one archive or gc does to each session it takes.
type gcJob struct {
	e          *clienv.Env
	w          *clienv.Where
	del        bool
	archiveDir string // "" for the home's archived_sessions
}

// Archive is `ctx agent session archive AGENT SESSION
// [--archive-dir ABS]`: a protected session is refused (EBUSY) and left as
// it was.
func Archive(e *clienv.Env, p *clienv.Parsed) int {
	job, code := newGCJob(e, p)
	if job == nil {
		return code
	}
	name := p.Args[1]
	if err := abi.CheckName("session", name); err != nil {
		return clienv.Fail(e, "archive", err, clienv.ExitUsage)
	}
	out := gcOutcome{Session: name, Action: "archive"}
	err := job.take(name)
	out.report(e, p.On("json"), job.explain(name, err))
	if err != nil {
		return clienv.ExitFailed
	}
	return clienv.ExitOK
}

// gcOutcome is what archive and gc did to one session. --json prints it
// as one object a line; otherwise it is SPEC 12's words: "archive NAME" in
// a dry run, "archived NAME" (or "deleted NAME"), and a failure as
// "ctx: archive NAME: ERRNO" on stderr, which --json prints too.
type gcOutcome struct {
	Session string `json:"session"`
	Action  string `json:"action"` // "archive" or "delete"
	DryRun  bool   `json:"dry_run,omitempty"`
	Done    bool   `json:"done"`
	Error   string `json:"error,omitempty"`   // the errno name of a failure
	Message string `json:"message,omitempty"` // why, when more than the errno says
}

func (o gcOutcome) report(e *clienv.Env, asJSON bool, err error) {
	o.Done = err == nil && !o.DryRun
	if err != nil {
		o.Error = abi.ErrnoName(abi.Errno(err))
		line := o.Error
		var why *abi.Error
		if errors.As(err, &why) && why.Msg != "" {
			o.Message = why.Msg
			line += ": " + why.Msg
		}
		fmt.Fprintf(e.Stderr, "ctx: %s %s: %s\n", o.Action, o.Session, line)
	}
	switch {
	case asJSON:
		b, _ := json.Marshal(o)
		e.Stdout.Write(append(b, '\n'))
	case o.DryRun:
		fmt.Fprintf(e.Stdout, "%s %s\n", o.Action, o.Session)
	case o.Done:
		fmt.Fprintf(e.Stdout, "%s %s\n", map[string]string{"archive": "archived", "delete": "deleted"}[o.Action], o.Session)
	}
}

// GC is `ctx agent session gc AGENT [--pattern GLOB]...
// [--older-than-days N] [--keep NAME]... [--yes] [--delete]
// [--archive-dir ABS]` (SPEC 12): without --yes a preview that writes
// nothing; with it each candidate is archived (or deleted) on its own,
// failures reported and the others carried on; exit 1 if any failed.
func GC(e *clienv.Env, p *clienv.Parsed) int {
	job, code := newGCJob(e, p)
	if job == nil {
		return code
	}
	sel, err := newSelection(p)
	if err != nil {
		return clienv.Fail(e, "gc", err, clienv.ExitUsage)
	}
	verb := "archive"
	if job.del {
		verb = "delete"
	}
	asJSON := p.On("json")
	if !p.On("yes") {
		return preview(e, job, sel, verb, asJSON)
	}
	var names []string
	if err := sel.candidates(job, func(n string) { names = append(names, n) }); err != nil {
		return clienv.Fail(e, "gc", err, clienv.ExitFailed)
	}
	prog := clienv.NewProgress(e, verb, len(names))
	status := clienv.ExitOK
	for i, n := range names {
		prog.Show(i)
		err := job.explain(n, job.take(n))
		prog.Clear()
		gcOutcome{Session: n, Action: verb}.report(e, asJSON, err)
		if err != nil {
			status = clienv.ExitFailed
		}
	}
	return status
}

// preview is gc without --yes: the header, then a line for each
// candidate as the server's answer about it comes. A gc that fails
// before its first candidate prints no header, only its error.
func preview(e *clienv.Env, job *gcJob, sel *selection, verb string, asJSON bool) int {
	header := sync.OnceFunc(func() {
		if asJSON { // JSON lines carry dry_run instead
			return
		}
		// The SPEC's line (12), which scripts read; a person at a terminal
		// is told the default patterns too, which no command line shows.
		if sel.defaults && clienv.IsTerminal(e.Stderr) {
			fmt.Fprintf(e.Stderr, "ctx: gc: the default patterns %s (--pattern GLOB replaces them)\n", strings.Join(defaultGCPatterns, " "))
		}
		fmt.Fprintf(e.Stdout, "ctx: dry-run; pass --yes to %s\n", verb)
	})
	err := sel.candidates(job, func(n string) {
		header()
		gcOutcome{Session: n, Action: verb, DryRun: true}.report(e, asJSON, nil)
	})
	if err != nil {
		return clienv.Fail(e, "gc", err, clienv.ExitFailed)
	}
	header()
	return clienv.ExitOK
}

// newGCJob reads the flags archive and gc share; a nil job means the
// command line was refused, with code as the exit status.
func newGCJob(e *clienv.Env, p *clienv.Parsed) (*gcJob, int) {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return nil, clienv.Fail(e, "gc", err, clienv.ExitUsage)
	}
	job := &gcJob{e: e, w: w, del: p.On("delete"), archiveDir: p.Str("archive-dir")}
	if err := job.check(); err != nil {
		return nil, clienv.UsageError(e, "gc", err.Error())
	}
	return job, clienv.ExitOK
}

// check applies SPEC 12's rules to --archive-dir: absolute, not with
// --delete, not overlapping the live session tree.
func (j *gcJob) check() error {
	d := j.archiveDir
	switch {
	case d == "":
		return nil
	case j.del:
		return errors.New("--archive-dir cannot go with --delete")
	case !filepath.IsAbs(d):
		return fmt.Errorf("--archive-dir %s is not an absolute path", d)
	}
	// As the kernel will walk them: a symlink to the live tree overlaps it
	// (taken, its mkdir of DIR/AGENT made a session of that name).
	rd, live := resolved(d), resolved(j.w.Loc.SessionsDir())
	if rd == live || strings.HasPrefix(rd, live+"/") || strings.HasPrefix(live, rd+"/") {
		return fmt.Errorf("--archive-dir %s overlaps the live sessions in %s", filepath.Clean(d), j.w.Loc.SessionsDir())
	}
	return nil
}

// resolved is the absolute path p with the symlinks of its longest
// existing prefix resolved; the rest, still to be made, is kept as given.
func resolved(p string) string {
	rest := ""
	for q := filepath.Clean(p); ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == "/" {
			return filepath.Clean(p)
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// take archives or deletes one session. An archive is one
// renameat2(RENAME_NOREPLACE) through the mount, by the caller's own
// authority, which the server carries out as the same archive (index
// clean-up, protections: EBUSY); a target outside the mount is another
// filesystem (EXDEV), found before anything is made there, and nothing is
// copied. A delete asks the server.
func (j *gcJob) take(name string) error {
	if j.del {
		return j.ask(name, "delete", "deleted")
	}
	if j.w.Scope == abi.ScopeShared {
		return errSharedArchive
	}
	dir := filepath.Join(j.w.Loc.HomeDir(), abi.ArchivedDir)
	if j.archiveDir != "" {
		dir = j.archiveDir
	}
	dir = filepath.Join(dir, j.w.Loc.Agent)
	sessions := j.w.Loc.SessionsDir()
	if err := sameMount(sessions, dir); err != nil {
		return err
	}
	made, err := mkdirAll(dir)
	if err != nil {
		return err
	}
	err = unix.Renameat2(unix.AT_FDCWD, filepath.Join(sessions, name), unix.AT_FDCWD, filepath.Join(dir, name), unix.RENAME_NOREPLACE)
	if err != nil {
		removeMade(made) // a refused archive makes nothing, not even dir
	}
	return err
}

// errSharedArchive is the archive of a shared space's session: the
// server's refusal (session.Engine.Archive) said before anything is
// tried, rather than the mount's EPERM at the mkdir of an
// archived_sessions/ a space has no place for.
var errSharedArchive = abi.Errorf(syscall.EINVAL, "", "archived sessions live in a home (SPEC 2): a shared space's sessions may be deleted (--delete)")

// mkdirAll is os.MkdirAll that says which directories it made, the
// deepest last.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == "/" {
			break
		}
		missing = append(missing, d)
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		switch err := os.Mkdir(missing[i], 0o700); {
		case err == nil:
			made = append(made, missing[i])
		case !errors.Is(err, os.ErrExist): // another's, made meanwhile, is not ours to remove
			removeMade(made)
			return nil, err
		}
	}
	return made, nil
}

// removeMade removes the directories mkdirAll made, the deepest first; one
// something else filled meanwhile stays (ENOTEMPTY).
func removeMade(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		os.Remove(made[i])
	}
}

// sameMount is EXDEV unless dir (or, when it does not exist yet, the
// nearest directory above it, where it would be made) is on the mount
// that holds from: the rename would be refused so, and a refused archive
// must make nothing, not even dir. The mount ids are what rename(2)
// compares; a bind mount of the same filesystem is another mount too.
func sameMount(from, dir string) error {
	want, err := mountID(from)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		got, err := mountID(d)
		switch {
		case errors.Is(err, syscall.ENOENT) && d != "/":
			continue
		case err != nil:
			return err
		case got != want:
			return &os.LinkError{Op: "archive", Old: from, New: dir, Err: syscall.EXDEV}
		}
		return nil
	}
}

// mountID is the id of the mount that holds path (statx STATX_MNT_ID);
// on a kernel without mount ids (before 5.8), its filesystem's device.
func mountID(path string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &st); err != nil {
		return 0, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return 1<<63 | uint64(st.Dev_major)<<32 | uint64(st.Dev_minor), nil
	}
	return st.Mnt_id, nil
}

// explain gives a failed archive of name its reason: a protected session
// (EBUSY) says which protection, asked of the server with a dry run; a
// session that is not there (ENOENT) says so as every command does, and
// Where it is when it was archived already. Other errors pass as they are.
func (j *gcJob) explain(name string, err error) error {
	switch abi.Errno(err) {
	case syscall.EBUSY:
		var se *client.ServerError
		if why := j.ask(name, "dry_run", "archivable"); errors.As(why, &se) && se.Code == "EBUSY" {
			return abi.Errorf(syscall.EBUSY, "", "%s", strings.TrimPrefix(se.Message, "archive: "))
		}
		return abi.Errorf(syscall.EBUSY, "", "session %s is in use", name)
	case syscall.ENOENT:
		return clienv.Missing(j.w, name, err)
	}
	return err
}

// ask sends the archive op for name with the flag set (dry_run, delete)
// and expects a frame of type want.
func (j *gcJob) ask(name, flag, want string) error {
	req := proto.NewObject("op", proto.OpArchive, "session", name, "scope", j.w.Scope, flag, true)
	if j.w.Scope == abi.ScopeShared {
		req.Set("space", j.w.Loc.Space)
	}
	_, err := clienv.Call(j.e, j.w, req, want)
	return err
}

// selection is which sessions a gc considers (SPEC 12).
type selection struct {
	patterns  []string
	defaults  bool // patterns are defaultGCPatterns: no --pattern
	keep      map[string]bool
	olderThan time.Duration // 0: any age
}

func newSelection(p *clienv.Parsed) (*selection, error) {
	s := &selection{patterns: p.All("pattern"), keep: map[string]bool{}}
	if len(s.patterns) == 0 {
		s.patterns, s.defaults = defaultGCPatterns, true
	}
	for _, pat := range s.patterns {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, clienv.BadUsage(fmt.Sprintf("bad --pattern %q", pat))
		}
	}
	for _, k := range p.All("keep") {
		s.keep[k] = true
	}
	if v := p.Str("older-than-days"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return nil, clienv.BadUsage(fmt.Sprintf("--older-than-days %q is not a number of days", v))
		}
		s.olderThan = time.Duration(n) * 24 * time.Hour
	}
	return s, nil
}

// candidates calls each, in name order, for the live sessions the
// selection takes (patterns, --keep, age) that the server says it would
// archive now: the protections (index, default, the current session, a
// run, a state that is active, unreadable or unsafe) are the server's one
// set of rules, which its archive applies too, asked for all the
// candidates in one request (op archivable), which writes nothing. each
// is called as the answer streams in.
func (s *selection) candidates(j *gcJob, each func(name string)) error {
	names, err := s.selected(j)
	if err != nil {
		return err
	}
	prog := clienv.NewProgress(j.e, "gc: checking session", len(names))
	defer prog.Clear()
	return j.archivable(names, prog, func(n string) {
		prog.Clear() // a line goes out clean
		each(n)
	})
}

// selected lists, in name order, the live sessions the selection takes
// by their names and age, before the server is asked about them.
func (s *selection) selected(j *gcJob) ([]string, error) {
	ents, err := os.ReadDir(j.w.Loc.SessionsDir())
	if err != nil {
		return nil, err
	}
	var out []string
	var prog *clienv.Progress
	if s.olderThan > 0 { // a look into each session through the mount
		prog = clienv.NewProgress(j.e, "gc: reading session", len(ents))
		defer prog.Clear()
	}
	for i, ent := range ents {
		prog.Show(i)
		n := ent.Name()
		switch {
		case !ent.IsDir() || n == abi.ReservedSessionName || s.keep[n] || !s.matches(n):
		case s.olderThan > 0 && !s.oldEnough(j, n):
		default:
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *selection) matches(name string) bool {
	for _, pat := range s.patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// oldEnough reports whether the session name's newest file is older
// than --older-than-days. One whose age cannot be told (its directory
// cannot be examined or listed: a member's own mount over a shared
// session refuses everyone else) is not old: it is passed over, and
// stderr says so (taken as infinitely old, it was offered to archive or
// delete however recently it was used).
func (s *selection) oldEnough(j *gcJob, name string) bool {
	newest, err := newestFileTime(filepath.Join(j.w.Loc.SessionsDir(), name))
	if err != nil {
		fmt.Fprintf(j.e.Stderr, "ctx: gc: %s passed over, its age unknown: %s\n", name, clienv.Describe("gc", err))
		return false
	}
	return time.Since(newest) >= s.olderThan
}

// newestFileTime is the latest modification time of a session directory
// and the files directly in it; an error when the directory cannot be
// examined or listed, or a file in it examined (a member's mount over a
// file refuses too). A file gone since the listing is left out.
func newestFileTime(dir string) (time.Time, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}, err
	}
	newest := st.ModTime()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return time.Time{}, err
	}
	for _, ent := range ents {
		info, err := ent.Info()
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return time.Time{}, err
		case info.ModTime().After(newest):
			newest = info.ModTime()
		}
	}
	return newest, nil
}
