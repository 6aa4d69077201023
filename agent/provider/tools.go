package provider

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// Tools offered to the model (SPEC 17). ctxfs spells tool names with dots
// ("fs.read"); both APIs allow only [a-zA-Z0-9_-]{1,64} in a function
// name, so on the wire a dot is an underscore ("fs_read"), in the tools
// offered and in the history's calls alike, and a call the model makes is
// mapped back to the offered tool's own name.

const (
	// MaxToolCalls bounds the calls one reply may make (EFBIG beyond).
	MaxToolCalls = 128
	// MaxToolCallBytes bounds the ids, names and arguments of one reply's
	// calls together (EFBIG beyond): a hostile provider's reply must not
	// make the server hold more.
	MaxToolCallBytes = 1 << 20
)

// emptySchema is the parameters of a tool that declares none: Anthropic
// requires an input_schema, and an object schema with no properties is
// what both APIs take for "no arguments".
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// wireName is a ctxfs tool name as the APIs take it.
func wireName(name string) string { return strings.ReplaceAll(name, ".", "_") }

// offered is the request's tools, checked, with their names on the wire.
type offered struct {
	tools  []modelapi.Tool
	byWire map[string]string // wire name → ctxfs name
	names  map[string]bool   // ctxfs names
}

// newOffered checks the tools: each name valid on the wire once mapped
// and distinct there, each parameters a JSON object (or none).
func newOffered(tools []modelapi.Tool) (offered, error) {
	o := offered{tools: tools, byWire: map[string]string{}, names: map[string]bool{}}
	for _, t := range tools {
		w := wireName(t.Name)
		if !nameOK(w) {
			return offered{}, fmt.Errorf("tool %q: not a name the API takes ([a-zA-Z0-9_.-], 1 to 64 characters)", t.Name)
		}
		if other, dup := o.byWire[w]; dup {
			return offered{}, fmt.Errorf("tools %q and %q: both are %q on the wire", other, t.Name, w)
		}
		if len(t.Parameters) > 0 && !isObject(t.Parameters) {
			return offered{}, fmt.Errorf("tool %q: parameters is not a JSON object", t.Name)
		}
		o.byWire[w], o.names[t.Name] = t.Name, true
	}
	return o, nil
}

// isObject says whether raw is one valid JSON object.
func isObject(raw json.RawMessage) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(raw, &obj) == nil && obj != nil
}

// has says whether a call of the history may go out as a call: only a
// call of a tool the request offers (an API refuses tool calls without
// tool definitions, and a definition is never sent for a tool that is not
// offered).
func (o offered) has(name string) bool { return o.names[name] }

// ctxfsName maps a name the model called back to the offered tool's; a
// name no offered tool has is kept as the wire spelled it, for the caller
// to refuse.
func (o offered) ctxfsName(wire string) string {
	if name, ok := o.byWire[wire]; ok {
		return name
	}
	return wire
}

// schema is a tool's parameters as sent.
func schema(t modelapi.Tool) json.RawMessage {
	if len(t.Parameters) == 0 {
		return emptySchema
	}
	return t.Parameters
}

// callSizeError is a reply whose calls go over a bound.
type callSizeError struct{ what string }

func (e callSizeError) Error() string { return e.what }

// calls gathers the tool calls of a streamed reply as their pieces
// arrive, keyed by the stream's own index for them, within MaxToolCalls
// and MaxToolCallBytes.
type calls struct {
	list  []*pendingCall       // in the order they started
	byKey map[int]*pendingCall // the latest call at each stream index
	held  int                  // bytes of ids, names and arguments held
}

// pendingCall is one call while its pieces arrive.
type pendingCall struct {
	key      int // the stream's index of it
	id, name string
	args     strings.Builder
}

// start begins a call at the stream's index key.
func (c *calls) start(key int, id, name string) (*pendingCall, error) {
	if len(c.list) >= MaxToolCalls {
		return nil, callSizeError{fmt.Sprintf("the reply makes over %d tool calls", MaxToolCalls)}
	}
	if err := c.hold(len(id) + len(name)); err != nil {
		return nil, err
	}
	if c.byKey == nil {
		c.byKey = map[int]*pendingCall{}
	}
	p := &pendingCall{key: key, id: id, name: name}
	c.byKey[key] = p
	c.list = append(c.list, p)
	return p, nil
}

// at is the call at the stream's index key, nil when none started there.
func (c *calls) at(key int) *pendingCall { return c.byKey[key] }

// addName appends a piece of a call's name (servers that split it).
func (c *calls) addName(p *pendingCall, piece string) error {
	if err := c.hold(len(piece)); err != nil {
		return err
	}
	p.name += piece
	return nil
}

// addArgs appends a piece of a call's arguments.
func (c *calls) addArgs(p *pendingCall, piece string) error {
	if err := c.hold(len(piece)); err != nil {
		return err
	}
	p.args.WriteString(piece)
	return nil
}

// hold counts n more bytes, refusing them beyond the bound: what is over
// it is never kept.
func (c *calls) hold(n int) error {
	if c.held+n > MaxToolCallBytes {
		return callSizeError{fmt.Sprintf("the reply's tool calls are over %d bytes", MaxToolCallBytes)}
	}
	c.held += n
	return nil
}

// result is the calls in the order of the stream's indexes (the order
// they started, for streams that reuse one), names mapped to the offered
// tools', empty arguments as {}; nil when there are none.
func (c *calls) result(o offered) []modelapi.ToolCall {
	if len(c.list) == 0 {
		return nil
	}
	sorted := append([]*pendingCall(nil), c.list...)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].key < sorted[b].key })
	out := make([]modelapi.ToolCall, 0, len(sorted))
	for _, p := range sorted {
		args := p.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		out = append(out, modelapi.ToolCall{ID: p.id, Name: o.ctxfsName(p.name), Arguments: args})
	}
	return out
}

// scrubCalls removes the key from what a provider put in its calls, as
// from its text.
func scrubCalls(list []modelapi.ToolCall, key string) []modelapi.ToolCall {
	for i, c := range list {
		list[i] = modelapi.ToolCall{ID: scrub(c.ID, key), Name: scrub(c.Name, key), Arguments: scrub(c.Arguments, key)}
	}
	return list
}
