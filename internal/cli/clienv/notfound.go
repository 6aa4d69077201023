package clienv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
)

// Not found, said one way by every command: what is missing, as the user
// named it, and the command that shows what exists; never a path inside
// the mount (the user named an agent and a session, not a file).

func enoent(format string, args ...any) error {
	return abi.Errorf(syscall.ENOENT, "", format, args...)
}

func noAgent(agent string) error {
	if client.KindOf(agent) == abi.KindModel {
		return enoent("no model %q (ctx agent list shows the models)", agent)
	}
	return enoent("no agent %q (ctx agent list shows the agents)", agent)
}

func noSession(w *Where, session string) error {
	if archived := archivedSession(w, session); exists(archived) {
		return enoent("no session %q of agent %q: it is archived, in %s (its files are there)", session, w.Loc.Agent, archived)
	}
	list := "ctx agent session list " + w.Loc.Agent
	if w.Loc.Space != "" {
		list += " --shared " + w.Loc.Space
	}
	return enoent("no session %q of agent %q (%s shows them)", session, w.Loc.Agent, list)
}

// archivedSession is where an archive of session would be: the home's
// archived_sessions/AGENT/SESSION (session list shows live sessions only).
func archivedSession(w *Where, session string) string {
	return filepath.Join(w.Loc.HomeDir(), abi.ArchivedDir, w.Loc.Agent, session)
}

func noSpace(w *Where) error {
	return enoent("no shared space %q (ls %s shows the spaces)", w.Loc.Space, filepath.Join(w.Loc.Root, "shared"))
}

func notMounted(root string) error {
	return enoent("ctxfs is not mounted at %s (ctxfs mount starts it; CTX_ROOT names another root)", root)
}

// Missing turns "no such file" on the way to a session into what is
// missing: the mount, the shared space, the agent or the session (session
// "" when the command names none). A mount whose server is gone (ENOTCONN)
// says so. Other errors pass through; describe drops their paths.
func Missing(w *Where, session string, err error) error {
	if errors.Is(err, syscall.ENOTCONN) {
		return abi.Errorf(syscall.ENOTCONN, "", "the ctxfs mount at %s does not answer: its server stopped (ctxfs mount cleans up and starts it)", w.Loc.Root)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if lerr := Located(w); lerr != nil {
		return lerr
	}
	if session != "" && !exists(filepath.Join(w.Loc.SessionsDir(), session)) {
		return noSession(w, session)
	}
	return err
}

// Located says what is missing on the way to the agent's sessions: the
// mount, the shared space or the agent. nil means they are there, and a
// file that is absent is only absent (an agent with no sessions yet).
func Located(w *Where) error {
	own := client.Loc{Root: w.Loc.Root, Uid: w.Loc.Uid}
	switch {
	case !exists(own.HomeDir()): // the mount shows every caller its home
		return notMounted(w.Loc.Root)
	case w.Loc.Space != "" && !exists(w.Loc.HomeDir()):
		return noSpace(w)
	case !agentKnown(w):
		return noAgent(w.Loc.Agent)
	}
	return nil
}

// agentKnown reports whether the agent is defined under the root (its
// program, definition directory or socket) or has sessions in this home:
// either makes "no sessions" a right answer rather than a typo's.
func agentKnown(w *Where) bool {
	return agentDefined(w.Loc.Root, w.Loc.Agent) || exists(filepath.Dir(w.Loc.SessionsDir()))
}

// agentDefined reports whether root has a definition or a socket of agent.
func agentDefined(root, agent string) bool {
	def := abi.DefinitionPath(root, client.KindOf(agent), agent)
	for _, p := range []string{def, def + abi.DefinitionSuffix, def + abi.SocketSuffix} {
		if exists(p) {
			return true
		}
	}
	return false
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mounted reports whether a ctxfs mount answers at root: root/home is a
// mount point (another device than root). A mount whose server died fails
// the stat (ENOTCONN) and is not mounted here.
func mounted(root string) bool {
	var r, h syscall.Stat_t
	return syscall.Stat(root, &r) == nil && syscall.Stat(filepath.Join(root, "home"), &h) == nil && r.Dev != h.Dev
}

// unreachable says why an agent's socket could not be reached: no server
// (a stale socket refuses, or nothing is mounted), something other than a
// socket in its place, or a live server that has no such agent, or one
// that does not serve a defined agent.
func unreachable(de *client.DialError) string {
	name := abi.ErrnoName(abi.Errno(de.Err))
	root, agent, ok := socketOwner(de.Path)
	if ok && name == "ECONNREFUSED" && !IsSocket(de.Path) {
		return fmt.Sprintf("ECONNREFUSED: agent %q has no socket: something else is in its place (ctx doctor says how to fix it)", agent)
	}
	if !ok || name != "ENOENT" {
		return name + ": ctxfs is not running (ctxfs mount starts it)"
	}
	up := mounted(root) // a stat of the mount: once
	switch {
	case !up && !agentDefined(root, agent):
		return fmt.Sprintf("ENOENT: ctxfs is not running at %s (ctxfs mount starts it), and no agent %q is defined there", root, agent)
	case !up:
		return fmt.Sprintf("ENOENT: ctxfs is not running at %s (ctxfs mount starts it)", root)
	case !agentDefined(root, agent):
		return noAgent(agent).Error()
	}
	return fmt.Sprintf("ENOENT: agent %q is defined but has no socket after %v: the server does not serve it (ctx doctor says why)", agent, client.SocketWait)
}

// socketOwner splits ROOT/agent/NAME.sock, or ROOT/model/PROVIDER/MODEL.sock
// (agent: "PROVIDER/MODEL").
func socketOwner(path string) (root, agent string, ok bool) {
	dir, base := filepath.Split(path)
	dir = filepath.Clean(dir)
	if !strings.HasSuffix(base, abi.SocketSuffix) {
		return "", "", false
	}
	name := strings.TrimSuffix(base, abi.SocketSuffix)
	switch {
	case filepath.Base(dir) == abi.KindAgent:
		return filepath.Dir(dir), name, true
	case filepath.Base(filepath.Dir(dir)) == abi.KindModel:
		return filepath.Dir(filepath.Dir(dir)), filepath.Base(dir) + "/" + name, true
	}
	return "", "", false
}
func IsSocket(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().Type() == os.ModeSocket
}
