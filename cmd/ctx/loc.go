package main

import (
	"errors"
	"fmt"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
)

// where is the target of a command: the agent's session container, the
// scope, and the session it resolved to.
type where struct {
	loc     client.Loc
	scope   string
	session string
}

// errUsage marks errors that are bad usage (exit 2 with a usage hint)
// rather than failures of the operation.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// scopeOf combines --scope, --space and --shared. --shared SPACE is
// shorthand for --scope shared --space SPACE; --space alone implies
// shared, since no other scope takes a space.
func scopeOf(p *parsed) (scope, space string, err error) {
	scope, space = p.str("scope"), p.str("space")
	if sh := p.str("shared"); sh != "" {
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

// resolveLoc works out the agent's session container and the scope.
func resolveLoc(e *env, p *parsed, agent string) (*where, error) {
	scope, space, err := scopeOf(p)
	if err != nil {
		return nil, err
	}
	w := &where{scope: scope, loc: client.Loc{Root: abi.RootFromEnv(e.getenv), Uid: e.uid, Space: space, Agent: agent}}
	return w, w.loc.Check()
}

// resolve is resolveLoc plus the session (section 9: --session, else
// index/current, else default). A temp session has no directory and no
// index, so without --session it is "default".
func resolve(e *env, p *parsed, agent string) (*where, error) {
	w, err := resolveLoc(e, p, agent)
	if err != nil {
		return nil, err
	}
	if w.scope == abi.ScopeTemp {
		w.session = p.str("session")
		if w.session == "" {
			w.session = abi.DefaultSession
		}
		return w, abi.CheckName("session", w.session)
	}
	w.session, err = w.loc.ResolveSession(p.str("session"))
	return w, err
}

// isUsage reports whether err is bad usage of the command line.
func isUsage(err error) bool {
	var u errUsage
	return errors.As(err, &u)
}
