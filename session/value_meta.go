package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// metaValue is a meta.json value that passed judgeMeta.
type metaValue struct {
	line   []byte // as stored: as written plus a final newline, or re-encoded when self_id was lowered
	selfID string // lowercase; "" when none
}

// judgeMeta judges a new meta.json for s (SPEC sections 5 and 14): one
// JSON object without duplicate keys; scope present and unchanged; model,
// when set, a defined "provider/model" (debug/echo is built in) or ""
// for automatic; self_id at most 32 of [a-z0-9_-], stored lowercase.
// Every refusal is EINVAL; whether the self_id is free is the claim's.
func (e *Engine) judgeMeta(s *sess, data []byte) (metaValue, error) {
	obj, err := proto.ParseObject(data, true)
	if err != nil {
		return metaValue{}, &abi.Error{Op: "write meta.json", Errno: syscall.EINVAL, Msg: err.Error()}
	}
	if scope, ok := obj.String("scope"); !ok || scope != s.scope {
		return metaValue{}, abi.Errorf(syscall.EINVAL, "write meta.json", "scope must stay %q", s.scope)
	}
	if raw := obj.Raw("model"); raw != nil {
		m, ok := obj.String("model")
		if err := e.checkMetaModel(m, ok); err != nil {
			return metaValue{}, err
		}
	}
	for _, k := range []string{"name", "rule", "reasoning", "client"} {
		if raw := obj.Raw(k); raw != nil {
			if _, ok := obj.String(k); !ok {
				return metaValue{}, abi.Errorf(syscall.EINVAL, "write meta.json", "%s must be a string", k)
			}
		}
	}
	// Stored as written (plus a final newline), unless self_id had to be
	// lowered: then the object is re-encoded, its keys in order.
	v := metaValue{line: append(bytesTrimNL(data), '\n')}
	if raw := obj.Raw("self_id"); raw != nil {
		id, ok := obj.String("self_id")
		if !ok || !layout.ValidSelfID(strings.ToLower(id)) {
			return metaValue{}, abi.Errorf(syscall.EINVAL, "write meta.json", "self_id must be at most 32 of [a-z0-9_-]")
		}
		v.selfID = strings.ToLower(id)
	}
	if v.selfID != "" {
		obj.Set("self_id", v.selfID)
		v.line = obj.Line()
	}
	return v, nil
}

// checkMetaModel judges meta.json's model (ok: it is a string): "" (the
// agent's own), or a model the root defines (agent.Load finds it, or it
// is the built-in debug/echo). A definition that exists but is invalid
// is taken: its runs say what is wrong with it.
func (e *Engine) checkMetaModel(m string, ok bool) error {
	switch {
	case !ok || (m != "" && !abi.ValidModelName(m)):
		return abi.Errorf(syscall.EINVAL, "write meta.json", "model must be \"provider/model\"")
	case m == "":
		return nil
	}
	if _, err := e.definition(layout.Container{Kind: abi.KindModel, Owner: m}); abi.Errno(err) == syscall.ENOENT {
		return abi.Errorf(syscall.EINVAL, "write meta.json", "model %q is not defined", m)
	}
	return nil
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
	if v.selfID != "" {
		if err := layout.ClaimSelfID(s.e.root, s.ref.Home, s.ref.Rel(), v.selfID); err != nil {
			return err
		}
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := s.e.writeValue(s.file(abi.FileMeta), v.line, s.own); err != nil {
		return err
	}
	s.e.changed(s.ref.Rel() + "/" + abi.FileMeta)
	return nil
}

// checkMeta is writeMeta's judgement of a meta.json being written, made
// at the write (CheckValue) and changing nothing: nil while data may
// still grow into one JSON value (the close judges it whole), else
// judgeMeta's refusal, or EEXIST for a self_id another session holds.
func (e *Engine) checkMeta(r layout.Ref, data []byte) error {
	if jsonUnfinished(data) {
		return nil
	}
	s, release, err := e.lookup(r)
	if err != nil {
		return err
	}
	defer release()
	v, err := e.judgeMeta(s, data)
	if err != nil || v.selfID == "" {
		return err
	}
	e.selfMu.Lock()
	defer e.selfMu.Unlock()
	return layout.SelfIDFree(e.root, s.ref.Home, s.ref.Rel(), v.selfID)
}

// jsonUnfinished reports whether data is the beginning of a JSON value
// that more bytes could finish: a piece of a value written in several
// writes (a line of an indented object ends in a newline too) is not a
// refusal yet. Anything else (a whole value, good or bad, or bytes no
// continuation can make valid) is judged now.
func jsonUnfinished(data []byte) bool {
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(data)).Decode(&v)
	return errors.Is(err, io.ErrUnexpectedEOF)
}

func bytesTrimNL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return append([]byte(nil), b...)
}
