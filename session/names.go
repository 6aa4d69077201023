package session

import (
	"path"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/session/layout"
)

// countNames has the index x of the container ct charge the names it comes
// to keep, and give back those it drops, to the uid of ct's home
// (quota.Names). A shared space's are not counted: its history is the
// server's in the store, which keeps no member's uid for a count after a
// restart to find.
func (e *Engine) countNames(x *index.Index, ct layout.Container) {
	uid, ok := layout.HomeUid(ct.Home)
	if !ok {
		return
	}
	names := e.limits.Names
	x.CountNames(func(n int64) error { return names.Take(uid, n) }, func(n int64) { names.Give(uid, n) })
}

// namesOf counts the names uid keeps: those of the index of every
// container of its home, each loaded for it (once loaded an index stays
// in memory, which is what the bound is about). A container holding no
// session holds no entry either (an entry names a session), so the
// containers are found by their sessions.
func (e *Engine) namesOf(uid uint32) int64 {
	seen := map[string]bool{}
	var n int64
	for _, s := range layout.HomeSessionDirs(e.root, layout.PrivateHome(uid), false) {
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
// first to the home's uid as one of its agents (quota.Limits.Agents:
// EDQUOT past the bound, and mk is not run); given back when mk fails.
// A dir that exists is mk's to answer (EEXIST), and charges nothing.
func (e *Engine) makeAgent(home, dir string, mk func() error) error {
	uid, ok := layout.HomeUid(home)
	if !ok || e.isDir(dir) {
		return mk()
	}
	if err := e.limits.Agents.Take(uid, 1); err != nil {
		return &abi.Error{Op: "mkdir", Path: e.root.Show(dir), Errno: abi.Errno(err), Msg: abi.Message(err)}
	}
	err := mk()
	if err != nil {
		e.limits.Agents.Give(uid, 1)
	}
	return err
}

// agentsOf counts the agents and models of uid's home: every directory of
// its agent/ and every <model>.d of its model/.
func (e *Engine) agentsOf(uid uint32) int64 {
	home := layout.PrivateHome(uid)
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
