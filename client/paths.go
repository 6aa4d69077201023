package client

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Loc names the session/ directory of one agent or model, in the caller's
// home or in a shared space. It is the unit that owns an index.
type Loc struct {
	Root  string
	Uid   int
	Space string // "" for the caller's home
	Agent string // an agent's name, or a model's "provider/model"
}

// Kind is abi.KindModel when Agent names a model (it has a slash), else
// abi.KindAgent.
func (l Loc) Kind() string { return KindOf(l.Agent) }

// KindOf is the kind of definition a name given as AGENT names:
// abi.KindModel for "provider/model", else abi.KindAgent.
func KindOf(name string) string {
	if strings.Contains(name, "/") {
		return abi.KindModel
	}
	return abi.KindAgent
}

// Check refuses names that are not ABI names: they become path components,
// so "../x" must never reach filepath.Join.
func (l Loc) Check() error {
	if l.Kind() == abi.KindModel && !abi.ValidModelName(l.Agent) {
		return abi.Errorf(syscall.EINVAL, "", "invalid model name %q (PROVIDER/MODEL, each a name)", l.Agent)
	}
	if l.Kind() == abi.KindAgent {
		if err := abi.CheckName("agent", l.Agent); err != nil {
			return err
		}
	}
	if l.Space != "" {
		return abi.CheckName("space", l.Space)
	}
	return nil
}

// Socket is the agent's or model's socket under the root.
func (l Loc) Socket() string { return abi.SocketPath(l.Root, l.Kind(), l.Agent) }

// HomeDir is <root>/home/<uid>, or <root>/shared/<space>.
func (l Loc) HomeDir() string {
	if l.Space != "" {
		return filepath.Join(l.Root, "shared", l.Space)
	}
	return filepath.Join(l.Root, "home", strconv.Itoa(l.Uid))
}

// SessionsDir is <home>/agent/<agent>/session, or for a model
// <home>/model/<provider>/<model>.d/session.
func (l Loc) SessionsDir() string {
	if l.Kind() == abi.KindModel {
		return filepath.Join(l.HomeDir(), abi.KindModel, filepath.FromSlash(l.Agent)+abi.DefinitionSuffix, "session")
	}
	return filepath.Join(l.HomeDir(), abi.KindAgent, l.Agent, "session")
}

// SessionFile is one file of a session directory, e.g. "messages.jsonl".
func (l Loc) SessionFile(session, file string) string {
	return filepath.Join(l.SessionsDir(), session, file)
}

// IndexFile is one file of the index, e.g. "list" or "current".
func (l Loc) IndexFile(name string) string {
	return filepath.Join(l.SessionsDir(), abi.ReservedSessionName, name)
}

// ResolveSession applies the SPEC section 9 rule for commands given no
// --session: index/current, then "default". A missing index (no send yet, or
// no home yet) and a dead mount (ENOTCONN: the socket will then say clearly
// that the server is down) fall back to "default"; any other read error is
// returned, because guessing would send to the wrong session.
func (l Loc) ResolveSession(given string) (string, error) {
	if given != "" {
		return given, abi.CheckName("session", given)
	}
	b, err := os.ReadFile(l.IndexFile("current"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTCONN) {
		return abi.DefaultSession, nil
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSuffix(string(b), "\n")
	if name == "" {
		return abi.DefaultSession, nil
	}
	if !abi.ValidSessionName(name) {
		return "", abi.Errorf(syscall.EIO, "", "index/current holds %q, not a session name", name)
	}
	return name, nil
}
