package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// The request bodies are written by hand rather than by json.Marshal: a
// long conversation's body is rendered before every model call, on the
// path to the run's first delta, and reflection over its thousands of
// messages cost about ten times what writing them does
// (docs/benchmarks.md, "The request body"). Each append method writes its
// struct byte for byte as json.Marshal would without HTML escaping (the
// tags' names, order and omitempty rules), which TestBodyAsMarshal and
// FuzzBody hold it to; the structs and their tags stay the description.

// body accumulates one JSON text; the first error (a raw value that is
// not JSON, a float JSON cannot hold) sticks.
type body struct {
	b   []byte
	err error
}

// key writes a member's name, after a comma unless it opens the object.
func (w *body) key(name string) {
	if c := w.b[len(w.b)-1]; c != '{' {
		w.b = append(w.b, ',')
	}
	w.b = append(append(append(w.b, '"'), name...), '"', ':')
}

func (w *body) str(name, s string) {
	w.key(name)
	w.b = jsonscan.AppendString(w.b, s)
}

// strOmit writes a string member unless it is empty (omitempty).
func (w *body) strOmit(name, s string) {
	if s != "" {
		w.str(name, s)
	}
}

func (w *body) num(name string, n int) {
	w.key(name)
	w.b = strconv.AppendInt(w.b, int64(n), 10)
}

func (w *body) boolean(name string, v bool) {
	w.key(name)
	w.b = strconv.AppendBool(w.b, v)
}

// raw writes a raw JSON value compacted, as json.Marshal writes a
// json.RawMessage; one that is not JSON is an error, as it is there.
func (w *body) raw(name string, v json.RawMessage) {
	w.key(name)
	b, ok := jsonscan.AppendCompact(w.b, v)
	if !ok && w.err == nil {
		w.err = fmt.Errorf("json: error calling MarshalJSON for type json.RawMessage: invalid JSON")
	}
	w.b = b
}

// float writes a *float64 member unless nil, as json.Marshal writes it.
func (w *body) float(name string, f *float64) {
	if f == nil {
		return
	}
	w.key(name)
	b, err := json.Marshal(*f) // rare, and json's float format has rules of its own
	if err != nil && w.err == nil {
		w.err = err
	}
	w.b = append(w.b, b...)
}

// array writes a member whose value is n elements, each by elem; a nil
// slice (n < 0) is null, as json.Marshal writes it.
func (w *body) array(name string, n int, elem func(i int)) {
	w.key(name)
	if n < 0 {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for i := range n {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		elem(i)
	}
	w.b = append(w.b, ']')
}

// element starts an array element written outside array (the settled
// turns' elements): a comma unless it is the array's first.
func (w *body) element() {
	if n := len(w.b); n > 0 && w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
}

// length is a slice's length for array: -1 for a nil slice.
func length[T any](s []T) int {
	if s == nil {
		return -1
	}
	return len(s)
}

// errNotSettled says that a request's messages could not be written from
// its settled turns: the caller writes its body afresh.
var errNotSettled = errors.New("the messages could not be written from the settled turns")

// messages writes the request's messages member: its elements by settled
// when that is set (false if it could not), else by fresh.
func (w *body) messages(settled func(w *body) bool, fresh func()) bool {
	if settled == nil {
		fresh()
		return true
	}
	w.key("messages")
	w.b = append(w.b, '[')
	if !settled(w) {
		return false
	}
	w.b = append(w.b, ']')
	return true
}

// open and close bracket an object.
func (w *body) open()  { w.b = append(w.b, '{') }
func (w *body) close() { w.b = append(w.b, '}') }

// done is the text written, or the first error.
func (w *body) done() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

func (r *oaRequest) marshal(size int) ([]byte, error) {
	w := &body{b: make([]byte, 0, size)}
	w.open()
	w.str("model", r.Model)
	if !w.messages(r.settled, func() { w.array("messages", length(r.Messages), func(i int) { r.Messages[i].write(w) }) }) {
		return nil, errNotSettled
	}
	if len(r.Tools) > 0 {
		w.array("tools", len(r.Tools), func(i int) { r.Tools[i].write(w) })
	}
	w.boolean("stream", r.Stream)
	w.key("stream_options")
	w.open()
	w.boolean("include_usage", r.StreamOptions.IncludeUsage)
	w.close()
	if r.MaxTokens != 0 {
		w.num("max_tokens", r.MaxTokens)
	}
	if r.MaxCompletionTokens != 0 {
		w.num("max_completion_tokens", r.MaxCompletionTokens)
	}
	w.float("temperature", r.Temperature)
	w.close()
	return w.done()
}

func (t *oaTool) write(w *body) {
	w.open()
	w.str("type", t.Type)
	w.key("function")
	w.open()
	w.str("name", t.Function.Name)
	w.strOmit("description", t.Function.Description)
	w.raw("parameters", t.Function.Parameters)
	w.close()
	w.close()
}

func (m *oaMessage) write(w *body) {
	w.open()
	w.str("role", m.Role)
	if m.Content != nil {
		w.str("content", *m.Content)
	}
	if len(m.ToolCalls) > 0 {
		w.array("tool_calls", len(m.ToolCalls), func(i int) {
			c := &m.ToolCalls[i]
			w.open()
			w.str("id", c.ID)
			w.str("type", c.Type)
			w.key("function")
			w.open()
			w.str("name", c.Function.Name)
			w.str("arguments", c.Function.Arguments)
			w.close()
			w.close()
		})
	}
	w.strOmit("tool_call_id", m.ToolCallID)
	w.close()
}

func (r *anRequest) marshal(size int) ([]byte, error) {
	w := &body{b: make([]byte, 0, size)}
	w.open()
	w.str("model", r.Model)
	w.num("max_tokens", r.MaxTokens)
	w.strOmit("system", r.System)
	if !w.messages(r.settled, func() { w.array("messages", length(r.Messages), func(i int) { r.Messages[i].write(w) }) }) {
		return nil, errNotSettled
	}
	if len(r.Tools) > 0 {
		w.array("tools", len(r.Tools), func(i int) {
			t := &r.Tools[i]
			w.open()
			w.str("name", t.Name)
			w.strOmit("description", t.Description)
			w.raw("input_schema", t.InputSchema)
			w.close()
		})
	}
	w.boolean("stream", r.Stream)
	w.float("temperature", r.Temperature)
	w.close()
	return w.done()
}

func (m *anMessage) write(w *body) {
	w.open()
	w.str("role", m.Role)
	w.array("content", length(m.Content), func(i int) { m.Content[i].write(w) })
	w.close()
}

func (b *anBlock) write(w *body) {
	w.open()
	w.str("type", b.Type)
	w.strOmit("text", b.Text)
	w.strOmit("id", b.ID)
	w.strOmit("name", b.Name)
	if len(b.Input) > 0 {
		w.raw("input", b.Input)
	}
	w.strOmit("tool_use_id", b.ToolUseID)
	w.strOmit("content", b.Content)
	if b.IsError {
		w.boolean("is_error", true)
	}
	w.close()
}

// textSize is about the bytes a request's turns take written: the size a
// body's buffer starts at, so that it is not copied as it grows.
func textSize(req modelapi.Request) int {
	n := len(req.System) + 256
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters) + 64
	}
	for _, t := range req.Turns {
		n += len(t.Text) + 48
		for _, c := range t.ToolCalls {
			n += len(c.Arguments) + len(c.ID) + len(c.Name) + 96
		}
	}
	return n + n/16 // a little for escapes
}
