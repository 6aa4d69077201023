package tools

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
)

// Args are a call's checked arguments, whatever the tool; each tool uses
// its own fields. It is also what the server hands the tool process.
type Args struct {
	Path    string   `json:"path,omitempty"`
	Offset  int64    `json:"offset,omitempty"`  // fs.read
	Limit   int      `json:"limit,omitempty"`   // fs.read; 0: MaxOutput
	Content []byte   `json:"content,omitempty"` // fs.write; bytes, so that the line to the tool process carries them exactly (base64)
	Old     []byte   `json:"old,omitempty"`     // fs.replace
	New     []byte   `json:"new,omitempty"`     // fs.replace
	Count   int      `json:"count,omitempty"`   // fs.replace; 0: 1
	Argv    []string `json:"argv,omitempty"`    // shell.exec: argv, or /bin/sh -c command
	Timeout int      `json:"timeout,omitempty"` // shell.exec, seconds; 0: DefaultTimeout
	Text    string   `json:"text,omitempty"`    // ask_user
}

// The argument objects as a model sends them, one per tool: a field the
// tool does not take is an unknown field, refused; a pointer tells a
// missing field from an empty one.
type (
	pathArgs struct{ Path *string }
	readArgs struct {
		Path          *string
		Offset, Limit *int64
	}
	writeArgs struct {
		Path, Content *string
		// ContentBase64 is content as base64, for bytes that are not
		// text: what a restore writes back (never offered to a model).
		ContentBase64 *string `json:"content_base64"`
	}
	replaceArgs struct {
		Path, Old, New *string
		Count          *int64
	}
	shellArgs struct {
		Argv    *[]string
		Command *string
		Timeout *int64
	}
	askArgs struct{ Text *string }
)

// Parse checks the arguments a model sent for the tool name (JSON text of
// one object) and returns them; an error is EINVAL with words for the
// model. Internal tools are accepted too (the server's own calls).
func Parse(name, arguments string) (*Args, error) {
	if _, ok := lookup(name, true); !ok {
		return nil, invalid(name, "no such tool")
	}
	if len(arguments) > MaxArguments {
		return nil, invalid(name, "arguments are over %d bytes", MaxArguments)
	}
	switch name {
	case FSList, FSStat, FSRemove, FSKeep:
		var a pathArgs
		if err := decode(name, arguments, &a); err != nil {
			return nil, err
		}
		return checked(name, &Args{Path: deref(a.Path)}, a.Path != nil, "path")
	case FSRead:
		return parseRead(arguments)
	case FSWrite:
		return parseWrite(arguments)
	case FSReplace:
		return parseReplace(arguments)
	case ShellExec:
		return parseShell(arguments)
	}
	var a askArgs
	if err := decode(name, arguments, &a); err != nil {
		return nil, err
	}
	if a.Text == nil || *a.Text == "" || len(*a.Text) > MaxCommand {
		return nil, invalid(name, "text must be a question of 1 to %d bytes", MaxCommand)
	}
	return &Args{Text: *a.Text}, nil
}

func parseRead(arguments string) (*Args, error) {
	var a readArgs
	if err := decode(FSRead, arguments, &a); err != nil {
		return nil, err
	}
	out := &Args{Path: deref(a.Path)}
	if a.Offset != nil {
		if *a.Offset < 0 {
			return nil, invalid(FSRead, "offset must not be negative")
		}
		out.Offset = *a.Offset
	}
	if a.Limit != nil {
		if *a.Limit < 1 || *a.Limit > MaxOutput {
			return nil, invalid(FSRead, "limit must be 1 to %d", MaxOutput)
		}
		out.Limit = int(*a.Limit)
	}
	return checked(FSRead, out, a.Path != nil, "path")
}

// parseWrite takes content, or content_base64 (bounded by MaxBefore: a
// restore writes back what a version kept).
func parseWrite(arguments string) (*Args, error) {
	var a writeArgs
	if err := decode(FSWrite, arguments, &a); err != nil {
		return nil, err
	}
	out := &Args{Path: deref(a.Path)}
	switch {
	case (a.Content == nil) == (a.ContentBase64 == nil):
		return nil, invalid(FSWrite, "give path and either content or content_base64")
	case a.Content != nil && len(*a.Content) > MaxWrite:
		return nil, invalid(FSWrite, "content is over %d bytes", MaxWrite)
	case a.Content != nil:
		out.Content = []byte(*a.Content)
	case base64.StdEncoding.DecodedLen(len(*a.ContentBase64)) > MaxBefore+2:
		return nil, invalid(FSWrite, "content_base64 is over %d bytes", MaxBefore)
	default:
		b, err := base64.StdEncoding.DecodeString(*a.ContentBase64)
		if err != nil || len(b) > MaxBefore {
			return nil, invalid(FSWrite, "content_base64 is not base64 of at most %d bytes", MaxBefore)
		}
		out.Content = b
	}
	return checked(FSWrite, out, a.Path != nil, "path")
}

func parseReplace(arguments string) (*Args, error) {
	var a replaceArgs
	if err := decode(FSReplace, arguments, &a); err != nil {
		return nil, err
	}
	if a.Path == nil || a.Old == nil || a.New == nil {
		return nil, invalid(FSReplace, "path, old and new are required")
	}
	out := &Args{Path: *a.Path, Old: []byte(*a.Old), New: []byte(*a.New), Count: 1}
	switch {
	case len(out.Old) == 0:
		return nil, invalid(FSReplace, "old must not be empty")
	case len(out.Old) > MaxWrite || len(out.New) > MaxWrite:
		return nil, invalid(FSReplace, "old and new must be at most %d bytes each", MaxWrite)
	case a.Count != nil && (*a.Count < 1 || *a.Count > MaxBefore):
		return nil, invalid(FSReplace, "count must be 1 to %d", MaxBefore)
	case a.Count != nil:
		out.Count = int(*a.Count)
	}
	return checked(FSReplace, out, true, "")
}

func parseShell(arguments string) (*Args, error) {
	var a shellArgs
	if err := decode(ShellExec, arguments, &a); err != nil {
		return nil, err
	}
	out := &Args{Timeout: DefaultTimeout}
	switch {
	case (a.Argv == nil) == (a.Command == nil):
		return nil, invalid(ShellExec, "give either argv or command")
	case a.Command != nil:
		if *a.Command == "" || len(*a.Command) > MaxCommand || strings.IndexByte(*a.Command, 0) >= 0 {
			return nil, invalid(ShellExec, "command must be 1 to %d bytes without NUL", MaxCommand)
		}
		out.Argv = []string{"/bin/sh", "-c", *a.Command}
	default:
		if err := checkArgv(*a.Argv); err != nil {
			return nil, err
		}
		out.Argv = *a.Argv
	}
	if a.Timeout != nil {
		if *a.Timeout < 1 || *a.Timeout > MaxTimeout {
			return nil, invalid(ShellExec, "timeout must be 1 to %d seconds", MaxTimeout)
		}
		out.Timeout = int(*a.Timeout)
	}
	return out, nil
}

// checkArgv bounds argv: what execve could not take is refused here, with
// words, rather than failing later as E2BIG or a truncated string.
func checkArgv(argv []string) error {
	if len(argv) == 0 || len(argv) > MaxArgv || argv[0] == "" {
		return invalid(ShellExec, "argv must hold a program and at most %d entries in all", MaxArgv)
	}
	total := 0
	for _, s := range argv {
		total += len(s) + 1
		if strings.IndexByte(s, 0) >= 0 {
			return invalid(ShellExec, "argv entries must not hold NUL")
		}
	}
	if total > MaxCommand {
		return invalid(ShellExec, "argv is over %d bytes", MaxCommand)
	}
	return nil
}

// decode reads exactly one JSON object into v, refusing unknown fields,
// wrong types, and anything after the object.
func decode(name, arguments string, v any) error {
	if !utf8.ValidString(arguments) {
		return invalid(name, "arguments are not UTF-8")
	}
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.DisallowUnknownFields()
	if t := bytes.TrimSpace([]byte(arguments)); len(t) == 0 || t[0] != '{' {
		return invalid(name, "arguments must be a JSON object")
	}
	if err := dec.Decode(v); err != nil {
		return invalid(name, "arguments: %v", err)
	}
	if dec.More() {
		return invalid(name, "arguments: more than one JSON value")
	}
	return nil
}

// checked checks the path of a tool that takes one; ok is false when a
// required field (named by what) is missing.
func checked(name string, a *Args, ok bool, what string) (*Args, error) {
	switch {
	case !ok:
		return nil, invalid(name, "%s required", what)
	case a.Path == "" || len(a.Path) > MaxPath:
		return nil, invalid(name, "path must be 1 to %d bytes", MaxPath)
	case strings.IndexByte(a.Path, 0) >= 0:
		return nil, invalid(name, "path must not hold NUL")
	}
	return a, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func invalid(name, format string, args ...any) error {
	return abi.Errorf(syscall.EINVAL, name, "%s", fmt.Sprintf(format, args...))
}
