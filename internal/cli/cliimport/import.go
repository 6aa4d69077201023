package cliimport

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
)

// Import is `ctx agent import AGENT --from CLI [--uid N] [FILE|DIR]...`.
// Each file is imported on its own: one line on stdout for each session
// made, one on stderr for each file refused. Exit 0 when every file was
// imported, 1 when one was not, 2 for bad usage or a server not reached.
func Import(e *clienv.Env, p *clienv.Parsed) int {
	from := p.Str("from")
	if from != cli.ClaudeCode && from != cli.Codex {
		return clienv.UsageError(e, "import", "--from is claude-code or codex")
	}
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "import", err, clienv.ExitUsage)
	}
	if w.Loc.Kind() != abi.KindAgent {
		return clienv.UsageError(e, "import", "sessions are imported into an agent, not a model")
	}
	// The files' names are the user's (a directory root's --uid walks is
	// hers): on a terminal, their control characters are not sent as such.
	job := &job{e: e, w: w, from: from, uid: uint32(e.Uid),
		stdout: clienv.ForTerminal(e.Stdout), stderr: clienv.ForTerminal(e.Stderr)}
	if s := p.Str("uid"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return clienv.UsageError(e, "import", "--uid takes a uid number")
		}
		job.uid, job.uidGiven = uint32(n), true
		w.Loc.Uid = int(n)
	}
	roots := p.Args[1:]
	if len(roots) == 0 {
		roots = []string{defaultDir(e, from)}
	}
	failed := false
	for _, root := range roots {
		var files []string
		err := job.asUid(func() (err error) {
			files, err = sessionFiles(from, root)
			return err
		})
		if err != nil {
			fmt.Fprintf(job.stderr, "ctx: import %s: %s\n", root, clienv.Describe("import", err))
			failed = true
		}
		prog := clienv.NewProgress(e, "import: file", len(files))
		for i, f := range files {
			prog.Show(i)
			imported, err := job.file(f)
			prog.Clear()
			if imported != "" {
				fmt.Fprintln(job.stdout, imported)
			}
			if err != nil {
				fmt.Fprintf(job.stderr, "ctx: import %s: %s\n", f, clienv.Describe("import", err))
				failed = true
				var de *client.DialError
				if errors.As(err, &de) {
					return clienv.ExitUsage // no server: every other file would fail the same
				}
			}
		}
	}
	if failed {
		return clienv.ExitFailed
	}
	return clienv.ExitOK
}

// defaultDir is where the CLI keeps the caller's sessions.
func defaultDir(e *clienv.Env, from string) string {
	if from == cli.Codex {
		return filepath.Join(e.Getenv("HOME"), ".codex", "sessions")
	}
	return filepath.Join(e.Getenv("HOME"), ".claude", "projects")
}

// claudeFile and codexFile are the names the CLIs give their session
// files; a directory is walked for them.
var (
	claudeFile = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.jsonl$`)
	codexFile  = regexp.MustCompile(`^rollout-.*\.jsonl$`)
)

// sessionFiles is root itself when it is not a directory, else the CLI's
// session files under it, in walk order (Claude Code's subagent files,
// under a subagents/ directory, are parts of their parent's session).
func sessionFiles(from, root string) ([]string, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{root}, nil
	}
	name := claudeFile
	if from == cli.Codex {
		name = codexFile
	}
	// Walked from root with a separator after it, so that a root that is
	// a symlink to a directory (os.Stat followed it) is walked too:
	// WalkDir lstats its root, and walked nothing of such a one (no file,
	// exit 0). Links below root are still not followed.
	var files []string
	err = filepath.WalkDir(root+string(filepath.Separator), func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "subagents":
			return filepath.SkipDir
		case d.Type().IsRegular() && name.MatchString(d.Name()):
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// job is one import command's state.
type job struct {
	e        *clienv.Env
	w        *clienv.Where
	from     string
	uid      uint32
	uidGiven bool
	// stdout and stderr are e's, through clienv.ForTerminal.
	stdout, stderr io.Writer
}

// asUid runs call with the filesystem rights of the uid imported for:
// root's --uid N walks, reads and copies N's files as N (storefs.AsUser),
// never as root, since N made the paths: a symlink of N's to root's
// ~/.claude, or to a directory of root's from the agent's HOME, would
// otherwise have root read its own sessions into N's home or make and
// give N a file where N may not write. Anyone else runs as themselves.
func (j *job) asUid(call func() error) error {
	if j.e.Uid != 0 || j.uid == 0 {
		return call()
	}
	return storefs.AsUser(storefs.UserCred(j.uid), call)
}

// file imports one session file: read as the caller (root's --uid N: as
// N), sent, and on success copied under the agent's HOME for the CLI's
// resume. It returns the line that says what it imported ("" when
// nothing was), for the caller to print between its progress lines.
func (j *job) file(path string) (imported string, err error) {
	var f *os.File
	var s *cli.Session
	err = j.asUid(func() (err error) {
		if f, err = openRegular(path); err != nil {
			return err
		}
		s, err = cli.ReadSession(j.from, f)
		return err
	})
	if f != nil {
		defer f.Close()
	}
	if err != nil {
		return "", err
	}
	if err := j.send(s); err != nil {
		return "", err
	}
	imported = fmt.Sprintf("imported %s as session %s (%d messages)", path, s.ID, len(s.Messages))
	if err := j.asUid(func() error { return j.keepForResume(f, path, s) }); err != nil {
		return imported, fmt.Errorf("imported, but the CLI's file was not copied under the agent's HOME (a send will not resume it): %w", err)
	}
	return imported, nil
}

// send makes the session on the server: the import request, then the
// messages, then its one answer frame.
func (j *job) send(s *cli.Session) error {
	ctx, stop := j.e.Interrupt()
	defer stop()
	conn, err := client.Dial(ctx, j.w.Loc.Socket())
	if err != nil {
		return err
	}
	defer conn.Close()
	req := proto.NewObject("op", proto.OpImport, "from", j.from, "uuid", s.ID, "messages", len(s.Messages))
	if abi.CheckCwd(s.CWD) == nil {
		req.Set("cwd", s.CWD)
	}
	if j.uidGiven {
		req.Set("uid", j.uid)
	}
	sendErr := conn.Send(req)
	for _, m := range s.Messages {
		if sendErr == nil {
			sendErr = conn.Send(m)
		}
	}
	f, err := conn.Next()
	switch {
	case err == io.EOF || err != nil:
		return clienv.NoReply(sendErr, err)
	case f.Type() == proto.FrameImported:
		return nil
	case f.Type() == proto.FrameError:
		return client.FrameError(f.Obj)
	}
	return abi.Errorf(syscall.EIO, "import", "the server answered %q", f.Type())
}

// openRegular opens a session file for reading: EINVAL when it is not a
// regular file. A FIFO (named, or swapped in for a file after the walk)
// is opened without waiting for a writer and refused, so that its writer
// can neither hold the import nor feed it lines without end.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = abi.Errorf(syscall.EINVAL, "import", "%s is not a regular file", filepath.Base(path))
		}
		return nil, err
	}
	return f, nil
}

// keepForResume copies the CLI's file where the CLI run by the agent
// looks for it: its HOME is the agent's root/home/agent (SPEC 16). Root's
// --uid N runs it as N (asUid): what it makes is N's.
func (j *job) keepForResume(f *os.File, path string, s *cli.Session) error {
	home := filepath.Join(j.w.Loc.HomeDir(), "agent", j.w.Loc.Agent, "root", "home", "agent")
	var dst string
	if j.from == cli.Codex {
		dst = filepath.Join(home, ".codex", "sessions", rolloutDay(filepath.Base(path)), filepath.Base(path))
	} else {
		dst = filepath.Join(home, ".claude", "projects", projectDir(s.CWD), s.ID+".jsonl")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	return copyWhole(f, dst)
}

// copyWhole makes dst (0600) a copy of src, whole or not at all: src is
// copied under a hidden name beside dst, synced, and renamed to dst,
// never over a file there (EEXIST). A copy made at dst itself and failed
// midway (EDQUOT past the free tree's bytes, an interrupt) left its first
// part there, which the CLI would resume as the whole conversation.
func copyWhole(src io.Reader, dst string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if rerr := unix.Renameat2(unix.AT_FDCWD, tmp.Name(), unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); rerr != nil {
			err = &os.LinkError{Op: "rename", Old: tmp.Name(), New: dst, Err: rerr}
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// rolloutDay is the YYYY/MM/DD directory Codex keeps a rollout in, from
// its name (rollout-YYYY-MM-DDThh-mm-ss-ID.jsonl); "imported" for another
// name.
func rolloutDay(name string) string {
	if m := rolloutDate.FindStringSubmatch(name); m != nil {
		return filepath.Join(m[1], m[2], m[3])
	}
	return "imported"
}

var rolloutDate = regexp.MustCompile(`^rollout-(\d{4})-(\d{2})-(\d{2})T`)

// projectDir is Claude Code's name for the project directory of cwd
// (docs/clis.md: every / and . becomes -).
func projectDir(cwd string) string {
	if cwd == "" {
		return "-imported"
	}
	return strings.NewReplacer("/", "-", ".", "-").Replace(cwd)
}
