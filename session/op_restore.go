package session

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/versions"
)

// restore puts files back as they were before a version, or before a run
// changed them (SPEC 17, op restore): a run of the agent's own, recorded
// like a send's (its user message says what is restored), whose calls of
// fs.write and fs.remove go through the same uid, isolation and approvals
// as a model's, and are versioned in turn. Everything it puts back is read
// and verified before anything is recorded: ENOENT when there is nothing
// to restore, EIO when a kept content does not verify, EFBIG when the
// calls that put it back take more than a log line to record.
func (e *Engine) restore(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	if loc.ref.Kind != abi.KindAgent {
		return nil, abi.Errorf(syscall.EINVAL, "restore", "a model session has no tools, so no versions")
	}
	defn, err := e.definition(loc.ref.Container)
	if err != nil {
		return nil, err
	}
	s, release, err := e.lookup(loc.ref)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.provable(); err != nil {
		return nil, err
	}
	steps, what, err := s.restoreSteps(req)
	if err == nil {
		err = agent.RestoreFits(steps) // before anything is recorded
	}
	if err != nil {
		return nil, err
	}
	d := *defn
	d.Restore = &def.Restore{Steps: steps}
	req.Input = what
	r, retry, err := e.sendTo(c, s, loc, req, &d, effectiveCwd(req.Cwd, defn), nil)
	if retry {
		return nil, abi.Errorf(syscall.EAGAIN, "restore", "a send with client id %q failed at the same time: try again", req.ID)
	}
	return r, err
}

// restoreSteps are the files a restore puts back, and the words of its
// user message: version N's earlier state, or each file a run changed as
// it was before the run's first change of it; only PATH when one is named.
func (s *sess) restoreSteps(req *proto.Request) ([]def.RestoreStep, string, error) {
	st, err := versions.Open(s.e.root, s.e.sealKey, s.rel)
	if err != nil {
		return nil, "", err
	}
	entries, err := st.List()
	if err != nil {
		return nil, "", err
	}
	chosen, what := versions.Choose(entries, versions.Selector{Version: req.Version, Run: req.Run, Path: req.Path})
	if len(chosen) == 0 {
		return nil, "", abi.Errorf(syscall.ENOENT, "restore", "nothing to restore: %s", what)
	}
	steps := make([]def.RestoreStep, 0, len(chosen))
	for _, en := range chosen {
		step := def.RestoreStep{Path: en.Path, Absent: en.Absent()}
		if !step.Absent {
			if step.Content, err = st.Content(en.V); err != nil {
				return nil, "", err
			}
		}
		steps = append(steps, step)
	}
	return steps, what, nil
}
