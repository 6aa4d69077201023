package proto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// Field is one member of an Object.
type Field struct {
	Key   string
	Value json.RawMessage
}

// Object is a JSON object that keeps its members in order, so that the lines
// ctxfs writes read naturally ("type" first) and so that duplicate keys can
// be detected (encoding/json silently keeps the last one).
type Object struct {
	// Fields are the members in order. Change them through Set and
	// Delete once the object may have been written (Line): Line keeps
	// what it made until then.
	Fields []Field

	// line is Line's result, kept until Set or Delete: a frame is written
	// to its log, counted against its run's stream and sent to each
	// reader, and each of those took a marshalling of its own (2-3% of
	// the server's CPU in BenchmarkDurableSends).
	line atomic.Pointer[[]byte]
}

// ParseObject decodes exactly one JSON object (white space around it
// allowed, nothing else). Duplicate keys are refused with EINVAL when
// strict is true; otherwise the last one wins. It reads the object in one
// pass (internal/jsonscan) into one copy of data that the members' values
// are slices of; the json.Decoder it replaces cost a reader of many lines
// (a client's reply, a log read at a session's load) most of its time.
func ParseObject(data []byte, strict bool) (*Object, error) {
	data = bytes.Clone(data)
	var m members
	var dup error
	ok, at := jsonscan.Members(data, func(rawKey, val []byte) {
		key, _ := jsonscan.String(rawKey)
		switch i := m.find(key); {
		case i < 0:
			m.add(key, val)
		case strict:
			if dup == nil {
				dup = abi.Errorf(syscall.EINVAL, "", "duplicate key %q", key)
			}
		default:
			m.fields[i].Value = val
		}
	})
	if !ok {
		if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
			return nil, abi.Errorf(syscall.EINVAL, "", "not a JSON object")
		}
		return nil, abi.Errorf(syscall.EINVAL, "", "bad JSON at byte %d of %d", at, len(data))
	}
	if dup != nil {
		return nil, dup
	}
	return &Object{Fields: m.fields}, nil
}

// members are an object's members in the order read. A key is found
// again by a scan while they are few, by a map once they are many (a
// hostile line may have thousands).
type members struct {
	fields []Field
	index  map[string]int // nil while there are few
}

// find is the index of key's member, or -1.
func (m *members) find(key string) int {
	if m.index != nil {
		if i, ok := m.index[key]; ok {
			return i
		}
		return -1
	}
	for i := range m.fields {
		if m.fields[i].Key == key {
			return i
		}
	}
	return -1
}

// add appends a member whose key is not there yet.
func (m *members) add(key string, val []byte) {
	m.fields = append(m.fields, Field{key, val})
	switch {
	case m.index != nil:
		m.index[key] = len(m.fields) - 1
	case len(m.fields) > 16:
		m.index = make(map[string]int, 2*len(m.fields))
		for i, f := range m.fields {
			m.index[f.Key] = i
		}
	}
}

// NewObject builds an Object from alternating keys and values; values are
// marshalled with encoding/json.
func NewObject(kv ...any) *Object {
	o := &Object{Fields: make([]Field, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		o.Set(kv[i].(string), kv[i+1])
	}
	return o
}

// Raw returns the raw value of key, or nil.
func (o *Object) Raw(key string) json.RawMessage {
	for _, f := range o.Fields {
		if f.Key == key {
			return f.Value
		}
	}
	return nil
}

// Has reports whether key is present.
func (o *Object) Has(key string) bool { return o.Raw(key) != nil }

// String returns the string value of key; ok is false when key is missing or
// not a string.
func (o *Object) String(key string) (s string, ok bool) {
	raw := o.Raw(key)
	if plain, ok := plainString(raw); ok {
		return plain, true
	}
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// Strings made of printable ASCII other than the characters JSON or
// encoding/json escape (" \ < > &) are the same bytes quoted and
// unquoted: the field names, ids, times and states of every frame. They
// skip encoding/json, whose Marshal and Unmarshal of such strings were
// 5-6% of the server's CPU in BenchmarkDurableSends; anything else goes
// through it, so the bytes written never depend on which way was taken.

// plainString is raw's content when raw is a quoted plain string.
func plainString(raw json.RawMessage) (string, bool) {
	if !isPlainString(raw) {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}

func isPlainString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && plain(raw[1:len(raw)-1])
}

// quotePlain is s quoted, when s is plain.
func quotePlain(s string) (json.RawMessage, bool) {
	if !plain(s) {
		return nil, false
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

func plain[T string | []byte](s T) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 { // a word at a time: every value of every line is asked
		if !plain8(uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56) {
			return false
		}
	}
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// plain8 says whether none of the eight bytes in x stops plain: no byte
// at or above 0x7f, and none below 0x20 or among `"\<>&` (the classic
// tests for a byte below n and for a zero byte, each exact in saying
// whether there is one).
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	if (x|(x+ones))&highs != 0 { // a byte of 0x7f or more
		return false
	}
	q, bs := x^(ones*'"'), x^(ones*'\\')
	lt, gt, amp := x^(ones*'<'), x^(ones*'>'), x^(ones*'&')
	return ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs|(lt-ones)&^lt|(gt-ones)&^gt|(amp-ones)&^amp)&highs == 0
}

// Str is String without ok.
func (o *Object) Str(key string) string { s, _ := o.String(key); return s }

// Set replaces key's value in place, or appends key at the end. The
// value is what encoding/json.Marshal makes of v; the kinds ctxfs's lines
// hold (strings, integers, booleans, objects, lists of objects) are
// written without its reflection, byte for byte as it writes them
// (TestSetAsMarshal, FuzzSetString): that reflection was most of the
// garbage of a send (docs/benchmarks.md#the-objects-of-a-send).
func (o *Object) Set(key string, v any) {
	raw, ok := marshalValue(v)
	if !ok {
		var err error
		raw, err = json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("proto: marshal %s: %v", key, err))
		}
	}
	o.line.Store(nil)
	for i := range o.Fields {
		if o.Fields[i].Key == key {
			o.Fields[i].Value = raw
			return
		}
	}
	o.Fields = append(o.Fields, Field{key, raw})
}

// marshalValue is json.Marshal(v) for the kinds it knows; false for the
// others.
func marshalValue(v any) (json.RawMessage, bool) {
	switch v := v.(type) {
	case json.RawMessage:
		return v, true
	case string:
		if raw, ok := quotePlain(v); ok {
			return raw, true
		}
		if strings.ContainsAny(v, "<>&") {
			return nil, false // escaped for HTML by encoding/json
		}
		return jsonscan.AppendString(make([]byte, 0, len(v)+8), v), true
	case bool:
		return strconv.AppendBool(nil, v), true
	case int:
		return strconv.AppendInt(make([]byte, 0, 8), int64(v), 10), true
	case int64:
		return strconv.AppendInt(make([]byte, 0, 8), v, 10), true
	case uint64:
		return strconv.AppendUint(make([]byte, 0, 8), v, 10), true
	case *Object:
		if v == nil {
			return json.RawMessage("null"), true
		}
		if htmlEscaped(v.compact()) {
			return nil, false
		}
		return bytes.Clone(v.compact()), true
	case []*Object:
		if v == nil {
			return json.RawMessage("null"), true
		}
		n := 2
		for _, e := range v {
			if htmlEscaped(e.compact()) {
				return nil, false
			}
			n += len(e.compact()) + 1
		}
		b := append(make([]byte, 0, n), '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, e.compact()...)
		}
		return append(b, ']'), true
	}
	return nil, false
}

// htmlEscaped says whether encoding/json would write the JSON text b
// otherwise when a Marshaler returns it: it escapes '<', '>', '&', U+2028
// and U+2029.
func htmlEscaped(b []byte) bool {
	return bytes.ContainsAny(b, "<>&\u2028\u2029")
}

// compact is the object's JSON without the newline, "null" for nil.
func (o *Object) compact() []byte {
	if o == nil {
		return []byte("null")
	}
	l := o.Line()
	return l[:len(l)-1]
}

// Delete removes key.
func (o *Object) Delete(key string) {
	o.line.Store(nil)
	for i := range o.Fields {
		if o.Fields[i].Key == key {
			o.Fields = append(o.Fields[:i], o.Fields[i+1:]...)
			return
		}
	}
}

// Clone returns a copy that shares no field slice with o.
func (o *Object) Clone() *Object {
	return &Object{Fields: append([]Field(nil), o.Fields...)}
}

// MarshalJSON writes the members in order, compactly.
func (o *Object) MarshalJSON() ([]byte, error) {
	if l := o.line.Load(); l != nil {
		return (*l)[: len(*l)-1 : len(*l)-1], nil
	}
	return o.marshal()
}

func (o *Object) marshal() ([]byte, error) {
	n := 3 // braces and Line's newline
	for _, f := range o.Fields {
		n += len(f.Key) + len(f.Value) + 4
	}
	b := append(make([]byte, 0, n), '{')
	for i, f := range o.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(b, f.Key)
		b = append(b, ':')
		if isPlainString(f.Value) {
			b = append(b, f.Value...) // compact already
			continue
		}
		var ok bool
		if b, ok = jsonscan.AppendCompact(b, f.Value); !ok {
			return nil, abi.Errorf(syscall.EINVAL, "", "member %q is not JSON", f.Key)
		}
	}
	return append(b, '}'), nil
}

// appendKey appends a member name as a JSON string. Names are nearly
// always plain ASCII ("type", "run", …), which need no escaping: writing
// them as they are spared a reflective json.Marshal per member of every
// frame.
func appendKey(b []byte, k string) []byte {
	if !plain(k) {
		q, _ := json.Marshal(k)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"')
}

// Line is the object as one JSON line, newline included. The bytes are
// shared by every caller until the object changes: callers must not
// change them (appending to them copies).
func (o *Object) Line() []byte {
	if l := o.line.Load(); l != nil {
		return *l
	}
	b, err := o.marshal()
	if err != nil {
		panic(fmt.Sprintf("proto: object with invalid member: %v", err))
	}
	b = append(b, '\n')
	b = b[:len(b):len(b)]
	o.line.Store(&b)
	return b
}
