package trajectory

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Info is what the document says about its session.
type Info struct {
	SessionID string // the session's name
	Agent     Agent
}

// encoder writes the document as steps come: the envelope's head, then one
// step a line, then the tail. It validates each step as it writes it and
// the envelope at the end.
type encoder struct {
	w       *bufio.Writer
	sch     *schemas
	shapes  *shapes // of the steps validated in full
	info    Info
	n       int    // steps written
	head    []byte // the document up to the steps
	first   []byte // the first step, for the envelope check
	prompt  *int64 // sums of the steps' metrics
	complet *int64
	buf     []byte // the step being written
}

func newEncoder(w io.Writer, sch *schemas, info Info) (*encoder, error) {
	e := &encoder{w: bufio.NewWriterSize(w, 64<<10), sch: sch, shapes: newShapes(sch), info: info}
	head := struct {
		SchemaVersion string `json:"schema_version"`
		SessionID     string `json:"session_id"`
		Agent         Agent  `json:"agent"`
	}{SchemaVersion, info.SessionID, info.Agent}
	b, err := marshal(head)
	if err != nil {
		return nil, err
	}
	// {"schema_version":…,"agent":{…}} becomes {…,"steps":[
	e.head = append(b[:len(b)-1:len(b)-1], `,"steps":[`...)
	_, err = e.w.Write(e.head)
	return e, err
}

// marshal is json.Marshal without HTML escapes: the text stays as the
// agent wrote it ("<", "&" and all).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeStep appends s to b as marshal writes it (appendStep), or fails
// as marshal does.
func encodeStep(b []byte, s *Step) ([]byte, error) {
	if out, ok := appendStep(b, s); ok {
		return out, nil
	}
	m, err := marshal(s)
	return append(b, m...), err
}

// step numbers s, validates it (by its shape when one like it validated
// before: shape.go) and writes it on a line of its own.
func (e *encoder) step(s *Step) error {
	e.n++
	s.StepID = e.n
	b, err := encodeStep(e.buf[:0], s)
	if err != nil {
		return err
	}
	e.buf = b
	if ok, shape := e.shapes.vouch(s, e.n); !ok {
		if err := validate(e.sch.step, b, fmt.Sprintf("step %d", s.StepID), stepRule(s.StepID)); err != nil {
			return err
		}
		e.shapes.learn(shape)
	}
	if e.n == 1 {
		e.first = bytes.Clone(b)
		e.w.WriteString("\n")
	} else {
		e.w.WriteString(",\n")
	}
	e.w.Write(b)
	if s.Metrics != nil {
		e.prompt = addPtr(e.prompt, s.Metrics.PromptTokens)
		e.complet = addPtr(e.complet, s.Metrics.CompletionTokens)
	}
	return nil
}

// finish writes the tail after validating the envelope: the head, the
// first step and the tail, which is the whole document but for the other
// steps, each validated already. No step is no document: ATIF needs one.
func (e *encoder) finish() error {
	if e.n == 0 {
		return abi.Errorf(syscall.ENODATA, "", "session %s has no messages", e.info.SessionID)
	}
	fm, err := marshal(FinalMetrics{TotalPromptTokens: e.prompt, TotalCompletionTokens: e.complet, TotalSteps: e.n})
	if err != nil {
		return err
	}
	tail := append(append([]byte(`],"final_metrics":`), fm...), '}')
	env := append(append(append([]byte{}, e.head...), e.first...), tail...)
	if err := validate(e.sch.doc, env, "the document", CheckRules); err != nil {
		return err
	}
	e.w.WriteString("\n")
	e.w.Write(tail)
	e.w.WriteString("\n")
	return e.w.Flush()
}
