package proto

import (
	"fmt"
	"strconv"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// requestFields are wireRequest's members, in the order decodeWire reads
// their values.
var requestFields = jsonscan.NewFields("op", "id", "session", "scope", "space", "cwd", "input", "after", "query",
	"delete", "dry_run", "run", "decision", "reason", "text", "version", "path", "sessions",
	"archived", "uid")

// decodeWire reads a request line into its wire shape in one pass
// (internal/jsonscan), as json.Unmarshal into wireRequest reads it: keys
// matched as encoding/json matches them, the last of a repeated key
// kept, a member that is null left missing, a value of the wrong type an
// error (TestDecodeWireAsUnmarshal, FuzzDecodeWire). json.Unmarshal,
// which checks the line and then decodes it by reflection, was most of a
// request's parse (docs/benchmarks.md, "A request's parse").
func decodeWire(line []byte) (wireRequest, error) {
	var w wireRequest
	var v [20][]byte
	if !requestFields.Object(line, v[:]) {
		return w, fmt.Errorf("not one JSON object")
	}
	var d wireDecoder
	w.Op, w.ID, w.Session, w.Scope = d.str("op", v[0]), d.str("id", v[1]), d.str("session", v[2]), d.str("scope", v[3])
	w.Space, w.Cwd, w.Input, w.After = d.str("space", v[4]), d.str("cwd", v[5]), d.str("input", v[6]), d.str("after", v[7])
	w.Query, w.Delete, w.DryRun = d.str("query", v[8]), d.boolean("delete", v[9]), d.boolean("dry_run", v[10])
	w.Run, w.Decision, w.Reason, w.Text = d.str("run", v[11]), d.str("decision", v[12]), d.str("reason", v[13]), d.str("text", v[14])
	w.Version, w.Path, w.Sessions = d.int64("version", v[15]), d.str("path", v[16]), d.strings("sessions", v[17])
	w.Archived, w.UID = d.boolean("archived", v[18]), d.uint32("uid", v[19])
	return w, d.err
}

// wireDecoder decodes members' raw values; the first error sticks.
type wireDecoder struct{ err error }

func (d *wireDecoder) fail(name, want string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s is not %s", name, want)
	}
}

// absent says whether a member is missing or null (json.Unmarshal leaves
// a pointer nil for both).
func absent(raw []byte) bool { return raw == nil || string(raw) == "null" }

func (d *wireDecoder) str(name string, raw []byte) *string {
	if absent(raw) {
		return nil
	}
	s, ok := jsonscan.String(raw)
	if !ok {
		d.fail(name, "a string")
		return nil
	}
	return &s
}

func (d *wireDecoder) boolean(name string, raw []byte) *bool {
	if absent(raw) {
		return nil
	}
	b := string(raw) == "true"
	if !b && string(raw) != "false" {
		d.fail(name, "true or false")
		return nil
	}
	return &b
}

// int64 reads an integer as encoding/json reads one into an int64: its
// literal as strconv.ParseInt takes it (no fraction, no exponent).
func (d *wireDecoder) int64(name string, raw []byte) *int64 {
	if absent(raw) {
		return nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		d.fail(name, "an integer")
		return nil
	}
	return &n
}

// uint32 reads an integer as encoding/json reads one into a uint32.
func (d *wireDecoder) uint32(name string, raw []byte) *uint32 {
	if absent(raw) {
		return nil
	}
	n, err := strconv.ParseUint(string(raw), 10, 32)
	if err != nil {
		d.fail(name, "a uid")
		return nil
	}
	u := uint32(n)
	return &u
}

// strings reads an array of strings; a null element is "", as
// json.Unmarshal leaves it.
func (d *wireDecoder) strings(name string, raw []byte) *[]string {
	if absent(raw) {
		return nil
	}
	list := []string{}
	ok := jsonscan.Elements(raw, func(elem []byte) {
		if string(elem) == "null" {
			list = append(list, "")
			return
		}
		s, isStr := jsonscan.String(elem)
		if !isStr {
			d.fail(name, "a list of strings")
		}
		list = append(list, s)
	})
	if !ok {
		d.fail(name, "a list of strings")
	}
	if d.err != nil {
		return nil
	}
	return &list
}
