package session

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/internal/gopool"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// commitStart makes a send's start records (the start and state lines,
// the user message) durable as one unit of both logs. A model API run
// that can start at once has its first request sent while the unit syncs
// (agent.AskEarly), so that the sync and the provider's answer overlap
// (docs/benchmarks.md, "The first delta of a model run"): the run takes
// that request only once it runs, after its durable start frame, and a
// unit that cannot be made durable aborts it, so nothing it received
// reaches a client. A unit refused before it is written (EINVAL, ENOSPC,
// EDQUOT, a log that is not provable: EIO) asks nothing of the provider.
func (rn *run) commitStart(events, msgs []byte) error {
	s := rn.s
	wait, err := sealedlog.BeginPair(s.events, events, s.msgs, msgs)
	if err == nil {
		err = rn.syncAsking(wait)
	}
	if err != nil {
		rn.cancel()
		return err
	}
	s.appended(abi.FileEvents, abi.FileMessages)
	return nil
}

// syncAsking waits for the start's unit (wait) and meanwhile readies the
// run and sends its first request (rn.early; the run waits for rn.asked,
// the start frame does not), when it may: a model API
// run that is no child (whose place among its parent's children may have
// to wait), with a place free now in the session's slots, which it keeps
// (a run that waits for one must read its prompt only once it has one).
func (rn *run) syncAsking(wait func() error) error {
	if !rn.spec.Def.AnsweredByAPI() || rn.parent != "" {
		return wait()
	}
	select {
	case rn.s.slots <- struct{}{}:
	default:
		return wait()
	}
	rn.early = true
	rn.asked = make(chan struct{})
	gopool.Go(func() { // on another core, while this one waits for the sync
		defer close(rn.asked)
		rn.rules = rn.s.e.runRules(rn)
		rn.spec.Prompt = rn.prompt(rn.rules)
		rn.spec.Early = agent.AskEarly(rn.ctx, rn.spec)
	})
	err := wait()
	if err != nil {
		rn.cancel() // a request not sent yet is not sent
		<-rn.asked
		rn.spec.Early.Abort()
		<-rn.s.slots
	}
	return err
}
