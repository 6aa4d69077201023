package session

import (
	"encoding/json"
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
	steps, what, err := s.restoreSteps(c, loc, req)
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
// In a shared space, only what c's own runs changed (ownVersions).
func (s *sess) restoreSteps(c layout.Caller, loc *location, req *proto.Request) ([]def.RestoreStep, string, error) {
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
	if loc.scope == abi.ScopeShared {
		if err := s.ownVersions(c.Uid, chosen); err != nil {
			return nil, "", err
		}
	}
	if err := restoreFits(chosen); err != nil {
		return nil, "", err
	}
	steps := make([]def.RestoreStep, 0, len(chosen))
	for _, en := range chosen {
		step := def.RestoreStep{Path: en.Path, Absent: en.Absent()}
		if !step.Absent {
			// From the listing above: Content(v) would read the whole
			// index again for each file (quadratic in the index).
			if step.Content, err = st.EntryContent(en); err != nil {
				return nil, "", err
			}
		}
		steps = append(steps, step)
	}
	return steps, what, nil
}

// ownVersions is EPERM unless uid's own runs made every version in
// chosen, by the uid their start events record. In a shared space a run
// is its caller's (newRun) and a restore is a run of whoever asks for it,
// while the path and content it puts back are what the version's run
// reported: a member's own tool process (which that member may tamper
// with) or CLI could report any, and another member's restore would then
// write them as that member, root's as root. SPEC 17's restore goes
// "through the same uid": a member restores what its own runs changed.
// In a home every run is the home's uid's, so the rule holds there
// already.
func (s *sess) ownVersions(uid uint32, chosen []versions.Entry) error {
	s.mu.Lock()
	byRun := make(map[string]uint32, len(s.clients))
	for _, rec := range s.clients {
		var maker uint32
		if rec.start != nil && json.Unmarshal(rec.start.Raw("uid"), &maker) == nil { // none: no one's, never taken for root's
			byRun[rec.run] = maker
		}
	}
	s.mu.Unlock()
	for _, en := range chosen {
		if maker, ok := byRun[en.Run]; !ok || maker != uid {
			return abi.Errorf(syscall.EPERM, "restore", "version %d was made by run %s, not a run of uid %d: in a shared space a member restores what its own runs changed", en.V, en.Run, uid)
		}
	}
	return nil
}

// Room, in a restore's assistant message, for what is not a content's
// base64 or a path: each call's id, name and JSON (restoreCallRoom), and
// the message's own fields with the run and time stamp the recorder adds
// (restoreMessageRoom).
const (
	restoreCallRoom    = 128
	restoreMessageRoom = 512
)

// restoreFits is EFBIG when the calls that put chosen back could not be
// recorded: a restore records them all, with each earlier content as
// base64, in one assistant message, one log line, before it makes them.
// It is decided on the index's sizes, before any content is read: one
// content is kept once however many lines name it (a run that changed
// many hard links of one file), so reading first held a copy per line
// in the server (32 links of an 8 MiB file: over 2 GiB at peak) only to
// fail to record them after the run had started. An estimate: once the
// contents are read, agent.RestoreFits judges the message itself.
func restoreFits(chosen []versions.Entry) error {
	total := int64(restoreMessageRoom)
	for _, en := range chosen {
		p, _ := json.Marshal(en.Path) // a string always marshals
		total += restoreCallRoom + int64(len(p))
		if !en.Absent() {
			total += (*en.Size + 2) / 3 * 4
		}
	}
	if total > abi.MaxLineBytes {
		return abi.Errorf(syscall.EFBIG, "restore", "the %d files' earlier contents would take %d bytes to record, more than a log line (%d): restore fewer at once (name a PATH), or copy a larger one back from versions/sha256/", len(chosen), total, abi.MaxLineBytes)
	}
	return nil
}
