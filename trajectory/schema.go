package trajectory

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"syscall"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaJSON is atif-v1.7.schema.json, the schema this package validates
// against; it is kept in the repository beside this file.
//
//go:embed atif-v1.7.schema.json
var schemaJSON []byte

// SchemaID is the schema's $id.
const SchemaID = "https://github.com/ctxfs/ctxfs/trajectory/atif-v1.7.schema.json"

// schemas are the compiled document schema, its step sub-schema and its
// timestamp definition (shape.go).
type schemas struct{ doc, step, timestamp *jsonschema.Schema }

// compiled compiles the embedded schema once. Formats are asserted: a
// date-time must be one.
var compiled = sync.OnceValues(func() (*schemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(SchemaID, doc); err != nil {
		return nil, err
	}
	var s schemas
	if s.doc, err = c.Compile(SchemaID); err != nil {
		return nil, err
	}
	if s.step, err = c.Compile(SchemaID + "#/$defs/step"); err != nil {
		return nil, err
	}
	if s.timestamp, err = c.Compile(SchemaID + "#/$defs/timestamp"); err != nil {
		return nil, err
	}
	return &s, nil
})

// InvalidError says that a document would not validate; it unwraps to
// EINVAL.
type InvalidError struct {
	Where string // "step 3", "the document"
	Msg   string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("EINVAL: %s does not validate as %s: %s", e.Where, SchemaVersion, e.Msg)
}

func (e *InvalidError) Unwrap() error { return syscall.EINVAL }

// validate checks the JSON in b against sch and, for steps, the rules a
// schema cannot state.
func validate(sch *jsonschema.Schema, b []byte, where string, rules func(any) error) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err == nil {
		err = sch.Validate(v)
	}
	if err == nil && rules != nil {
		err = rules(v)
	}
	if err != nil {
		return &InvalidError{Where: where, Msg: summary(err)}
	}
	return nil
}

// summary is a validation error on one line: its first few leaf causes,
// each "at '/json/pointer': what".
func summary(err error) string {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	var leaves []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(leaves) == 3 {
			return
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, e.Error())
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(leaves, "; ")
}
