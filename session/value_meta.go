package session

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/meta"
)

// judgeMeta judges a new meta.json for s (meta.Judge), a model it names
// looked up among the root's definitions.
func (e *Engine) judgeMeta(s *sess, data []byte) (meta.Value, error) {
	return meta.Judge(data, s.scope, func(m string) bool {
		_, err := e.definition(layout.Container{Kind: abi.KindModel, Owner: m})
		return abi.Errno(err) == syscall.ENOENT
	})
}

// writeMeta replaces meta.json with data once judgeMeta takes it and its
// self_id, if any, is claimed: unique among the sessions of one home or
// space (EEXIST).
func (e *Engine) writeMeta(s *sess, data []byte) error {
	v, err := e.judgeMeta(s, data)
	if err != nil {
		return err
	}
	s.e.selfMu.Lock()
	defer s.e.selfMu.Unlock()
	// What it grows by is history of the home (EDQUOT past the
	// bound), charged before anything is written: the self_id's claim too.
	done, err := s.e.chargeResize(s.ref.Home, s.file(abi.FileMeta), int64(len(v.Line)))
	if err != nil {
		return err
	}
	if v.SelfID != "" {
		if err := layout.ClaimSelfID(s.e.root, s.ref.Home, s.ref.Rel(), v.SelfID); err != nil {
			done(false)
			return err
		}
	}
	held := s.metaString("self_id") // the one it gives up, if another
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := s.e.writeValue(s.file(abi.FileMeta), v.Line, s.own); err != nil {
		done(false)
		layout.ReleaseSelfID(s.e.root, s.ref.Home, s.ref.Rel(), v.SelfID) // claimed for nothing
		return err
	}
	done(true)
	if held != v.SelfID {
		layout.ReleaseSelfID(s.e.root, s.ref.Home, s.ref.Rel(), held)
	}
	s.e.changed(s.ref.Rel() + "/" + abi.FileMeta)
	return nil
}

// checkMeta is writeMeta's judgement of a meta.json being written, made
// at the write (CheckValue) and changing nothing: nil while data may
// still grow into one JSON value (the close judges it whole), else
// judgeMeta's refusal, or EEXIST for a self_id another session holds.
func (e *Engine) checkMeta(r layout.Ref, data []byte) error {
	if meta.Unfinished(data) {
		return nil
	}
	s, release, err := e.lookup(r)
	if err != nil {
		return err
	}
	defer release()
	v, err := e.judgeMeta(s, data)
	if err != nil || v.SelfID == "" {
		return err
	}
	e.selfMu.Lock()
	defer e.selfMu.Unlock()
	return layout.SelfIDFree(e.root, s.ref.Home, s.ref.Rel(), v.SelfID)
}
