package clienv

import (
	"errors"
	"fmt"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

// Where is the target of a command: the agent's session container, the
// scope, and the session it resolved to.
type Where struct {
	Loc     client.Loc
	Scope   string
	Session string
}

// errUsage marks errors that are bad usage (exit 2 with a usage hint)
// rather than failures of the operation.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// BadUsage is an error that is bad usage of the command line: Fail
// reports it with a pointer to the command's help, exit 2.
func BadUsage(msg string) error { return errUsage{msg} }

// scopeOf combines --scope, --space and --shared. --shared SPACE is
// shorthand for --scope shared --space SPACE; --space alone implies
// shared, since no other scope takes a space.
func scopeOf(p *Parsed) (scope, space string, err error) {
	scope, space = p.Str("scope"), p.Str("space")
	if sh := p.Str("shared"); sh != "" {
		if scope != "" && scope != abi.ScopeShared || space != "" && space != sh {
			return "", "", errUsage{"--shared SPACE conflicts with --scope/--space"}
		}
		scope, space = abi.ScopeShared, sh
	}
	if scope == "" {
		scope = abi.ScopePrivate
		if space != "" {
			scope = abi.ScopeShared
		}
	}
	switch {
	case !abi.ValidScope(scope):
		return "", "", errUsage{fmt.Sprintf("unknown scope %q (private, shared or temp)", scope)}
	case scope == abi.ScopeShared && space == "":
		return "", "", errUsage{"--scope shared needs --space SPACE"}
	case scope != abi.ScopeShared && space != "":
		return "", "", errUsage{"--space goes only with --scope shared"}
	}
	return scope, space, nil
}

// ResolveLoc works out the agent's session container and the scope.
func ResolveLoc(e *Env, p *Parsed, agent string) (*Where, error) {
	scope, space, err := scopeOf(p)
	if err != nil {
		return nil, err
	}
	w := &Where{Scope: scope, Loc: client.Loc{Root: abi.RootFromEnv(e.Getenv), Uid: e.Uid, Space: space, Agent: agent}}
	return w, w.Loc.Check()
}

// Resolve is resolveLoc plus the session (section 9: --session, else
// index/current, else default). A temp session has no directory and no
// index, so without --session it is "default".
func Resolve(e *Env, p *Parsed, agent string) (*Where, error) {
	w, err := ResolveLoc(e, p, agent)
	if err != nil {
		return nil, err
	}
	if w.Scope == abi.ScopeTemp {
		w.Session = p.Str("session")
		if w.Session == "" {
			w.Session = abi.DefaultSession
		}
		return w, abi.CheckName("session", w.Session)
	}
	w.Session, err = w.Loc.ResolveSession(p.Str("session"))
	return w, err
}

// SetScope names w's scope in req, when it is not the default: a run id
// or a call is found only in its own home, space or temp sessions.
func (w *Where) SetScope(req *proto.Object) {
	if w.Scope != abi.ScopePrivate {
		req.Set("scope", w.Scope)
	}
	if w.Scope == abi.ScopeShared {
		req.Set("space", w.Loc.Space)
	}
}

// ScopeFlags are the flags that name w's scope on a command line: "" for
// a private session, " --shared SPACE", " --scope temp". Space names are
// checked names, which need no shell quoting.
func (w *Where) ScopeFlags() string {
	switch w.Scope {
	case abi.ScopeShared:
		return " --shared " + w.Loc.Space
	case abi.ScopeTemp:
		return " --scope temp"
	}
	return ""
}

// isUsage reports whether err is bad usage of the command line.
func isUsage(err error) bool {
	var u errUsage
	return errors.As(err, &u)
}
