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

// Loc names the session/ directory of one agent, in the caller's home or in a
// shared space. It is the unit that owns an index.
type Loc struct {
	Root  string
	Uid   int
	Space string // "" for the caller's home
	Agent string
}

// Check refuses names that are not ABI names: they become path components,
// so "../x" must never reach filepath.Join.
func (l Loc) Check() error {
	if err := abi.CheckName("agent", l.Agent); err != nil {
		return err
	}
	if l.Space != "" {
		return abi.CheckName("space", l.Space)
	}
	return nil
}

// HomeDir is <root>/home/<uid>, or <root>/shared/<space>.
func (l Loc) HomeDir() string {
	if l.Space != "" {
		return filepath.Join(l.Root, "shared", l.Space)
	}
	return filepath.Join(l.Root, "home", strconv.Itoa(l.Uid))
}

// SessionsDir is <home>/agent/<agent>/session.
func (l Loc) SessionsDir() string {
	return filepath.Join(l.HomeDir(), "agent", l.Agent, "session")
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
