// Package meta owns the judgement of a meta.json value written to a
// session (SPEC sections 5 and 14): one JSON object without duplicate
// keys, its scope unchanged, its model a defined "provider/model" or "",
// its string fields strings, its self_id stored lowercase; and when bytes
// written so far are still an unfinished JSON value (Unfinished).
//
// It judges bytes only: it must never read or write the store, claim a
// self_id (layout's, under the engine's lock), read a definition (the
// engine says whether a model is defined), or import the engine, fs,
// server or cmd.
package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Value is a meta.json value that passed Judge.
type Value struct {
	Line   []byte // as stored: as written plus a final newline, or re-encoded when self_id was lowered
	SelfID string // lowercase; "" when none
}

// Judge judges a new meta.json for a session whose scope is sessScope
// (SPEC sections 5 and 14): one JSON object without duplicate keys; scope
// present and unchanged; model, when set, a defined "provider/model"
// (debug/echo is built in) or "" for automatic; self_id at most 32 of
// [a-z0-9_-], stored lowercase. Every refusal is EINVAL, but EFBIG for a
// value that, re-encoded to lower its self_id, is over 1 MiB; whether the
// self_id is free is the claim's.
func Judge(data []byte, sessScope string, undefined func(model string) bool) (Value, error) {
	obj, err := proto.ParseObject(data, true)
	if err != nil {
		return Value{}, &abi.Error{Op: "write meta.json", Errno: syscall.EINVAL, Msg: err.Error()}
	}
	if scope, ok := obj.String("scope"); !ok || scope != sessScope {
		return Value{}, abi.Errorf(syscall.EINVAL, "write meta.json", "scope must stay %q", sessScope)
	}
	if raw := obj.Raw("model"); raw != nil {
		m, ok := obj.String("model")
		if err := checkModel(m, ok, undefined); err != nil {
			return Value{}, err
		}
	}
	for _, k := range []string{"name", "rule", "reasoning", "client"} {
		if raw := obj.Raw(k); raw != nil {
			if _, ok := obj.String(k); !ok {
				return Value{}, abi.Errorf(syscall.EINVAL, "write meta.json", "%s must be a string", k)
			}
		}
	}
	// Stored as written (plus a final newline), unless self_id had to be
	// lowered: then the object is re-encoded, its keys in order.
	v := Value{Line: append(bytesTrimNL(data), '\n')}
	if raw := obj.Raw("self_id"); raw != nil {
		id, ok := obj.String("self_id")
		// ASCII lowering: strings.ToLower takes the Kelvin sign (U+212A)
		// to "k" and so would store a self_id nobody wrote.
		lower := asciiLower(id)
		if !ok || !layout.ValidSelfID(lower) {
			return Value{}, abi.Errorf(syscall.EINVAL, "write meta.json", "self_id must be at most 32 of [a-z0-9_-]")
		}
		v.SelfID = lower
	}
	if v.SelfID != "" {
		obj.Set("self_id", v.SelfID)
		v.Line = obj.Line()
	}
	if len(v.Line) > layout.MaxValueFile {
		// Re-encoded, a member name may be longer than written ("<" is
		// \u003c): stored so, no reader would take it.
		return Value{}, abi.Errorf(syscall.EFBIG, "write meta.json", "with its self_id lowered, meta.json is %d bytes, over the 1 MiB a value holds", len(v.Line))
	}
	return v, nil
}

// checkModel judges meta.json's model (ok: it is a string): "" (the
// agent's own), or a model the root defines (def.Load finds it, or it
// is the built-in debug/echo: undefined says it is not). A definition
// that exists but is invalid is taken: its runs say what is wrong with
// it.
func checkModel(m string, ok bool, undefined func(model string) bool) error {
	switch {
	case !ok || (m != "" && !abi.ValidModelName(m)):
		return abi.Errorf(syscall.EINVAL, "write meta.json", "model must be \"provider/model\"")
	case m == "":
		return nil
	}
	if undefined(m) {
		return abi.Errorf(syscall.EINVAL, "write meta.json", "model %q is not defined", m)
	}
	return nil
}

// Unfinished reports whether data is the beginning of a JSON value
// that more bytes could finish: a piece of a value written in several
// writes (a line of an indented object ends in a newline too) is not a
// refusal yet. Anything else (a whole value, good or bad, or bytes no
// continuation can make valid) is judged now.
func Unfinished(data []byte) bool {
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

// asciiLower lowers the ASCII letters of s and leaves every other byte.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
