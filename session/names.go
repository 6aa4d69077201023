package session

import (
	"path"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/session/layout"
)

// countNames has the index x of the container ct charge the names it comes
// to keep, and give back those it drops, to ct's home (quota.Names): a
// private home's, its uid's, or a shared space's, the space's as a whole.
func (e *Engine) countNames(x *index.Index, ct layout.Container) {
	if !homeCounted(ct.Home) {
		return
	}
	home, names := ct.Home, e.limits.Names
	x.CountNames(func(n int64) error { return names.Take(home, n) }, func(n int64) { names.Give(home, n) })
}

// homeCounted says whether what is made in home is counted: its names and
// agents (quota.Names) and its bytes of history (quota.History). Those of
// a uid's home are, but root's, which is the reserve, and those of a
// shared space. A space's are counted as the space's, whoever made them:
// its history is the server's in the store, with no member's uid for a
// count after a restart to find, and a bound no member's count holds
// would let one member make the server keep names, or fill its disk,
// without end.
func homeCounted(home string) bool {
	if uid, ok := layout.HomeUid(home); ok {
		return uid != 0
	}
	return strings.HasPrefix(home, "shared/")
}

// namesOf counts the names home keeps: those of the index of every
// container of home, each loaded for it (once loaded an index stays in
// memory, which is what the bound is about). A container holding no
// session holds no entry either (an entry names a session), so the
// containers are found by their sessions.
func (e *Engine) namesOf(home string) int64 {
	seen := map[string]bool{}
	var n int64
	for _, s := range layout.HomeSessionDirs(e.root, home, false) {
		rel := path.Dir(s)
		if seen[rel] {
			continue
		}
		seen[rel] = true
		if ct, rest, ok := layout.ParseContainerRel(rel); ok && rest == "" {
			if x, err := e.Index(ct); err == nil {
				n += x.Names()
			}
		}
	}
	return n
}

// makeAgent runs mk, which makes dir, an agent's or a model's directory
// of home (by mkdir, or by a session's first send or import), charged
// first to home as one of its agents (quota.Limits.Agents: EDQUOT past
// the bound, and mk is not run); given back when mk fails. A dir that
// exists is mk's to answer (EEXIST), and charges nothing. A missing one
// is looked at again and made under one lock: first sends racing to one
// agent each saw it missing and each charged it, and mk (MkdirAll) made
// it once, so it counted as several until a restart.
func (e *Engine) makeAgent(home, dir string, mk func() error) error {
	if !homeCounted(home) || e.isDir(dir) {
		return mk()
	}
	e.agentMu.Lock()
	defer e.agentMu.Unlock()
	if e.isDir(dir) {
		return mk()
	}
	if err := e.limits.Agents.Take(home, 1); err != nil {
		return &abi.Error{Op: "mkdir", Path: e.root.Show(dir), Errno: abi.Errno(err), Msg: abi.Message(err)}
	}
	err := mk()
	if err != nil {
		e.limits.Agents.Give(home, 1)
	}
	return err
}

// roomFor refuses with EDQUOT a session r that its home could not keep
// (quota.Names: its agent, not made yet, past the agents' bound, or its
// names past the names'), before a send or an import makes anything for
// it: the run's root/, made first, is in the caller's own home for a
// shared session, so the space's refusal as the session is made
// (createFilled) would come after it. The session's names (names: it and
// an import's entry) are taken here, held for createFilled: only checked,
// first sends racing to agents the home lacked, with room for one
// session, each found room, made its agent, and was then refused. The
// agent is charged as it is made (makeAgent).
func (e *Engine) roomFor(r layout.Ref, names int64) (*heldNames, error) {
	home := r.Home
	if r.Temp || !homeCounted(home) {
		return nil, nil
	}
	var err error
	if dir := path.Dir(r.Container.Rel()); !e.isDir(dir) {
		err = e.limits.Agents.Room(home, 1)
	}
	if err == nil {
		err = e.limits.Names.Take(home, names)
	}
	if err != nil {
		return nil, &abi.Error{Op: "create session", Path: r.Name, Errno: abi.Errno(err), Msg: abi.Message(err)}
	}
	return &heldNames{names: e.limits.Names, home: home, n: names}, nil
}

// heldNames are names a home's count holds for a session about to be
// made (roomFor); nil holds none.
type heldNames struct {
	names *quota.Names
	home  string
	n     int64
}

// pass hands the names over to the session's making (createFilled),
// which gives them back unless the session was made.
func (h *heldNames) pass() int64 {
	if h == nil {
		return 0
	}
	n := h.n
	h.n = 0
	return n
}

// give gives back what was not passed on.
func (h *heldNames) give() {
	if n := h.pass(); n > 0 {
		h.names.Give(h.home, n)
	}
}

// agentsOf counts the agents and models of home: every directory of its
// agent/ and every <model>.d of its model/.
func (e *Engine) agentsOf(home string) int64 {
	n := int64(len(layout.Subdirs(e.root, home+"/"+abi.KindAgent)))
	for _, p := range layout.Subdirs(e.root, home+"/"+abi.KindModel) {
		for _, m := range layout.Subdirs(e.root, path.Join(home, abi.KindModel, p)) {
			if strings.HasSuffix(m, ".d") {
				n++
			}
		}
	}
	return n
}
