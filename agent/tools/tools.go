// Package tools owns the built-in tools a model run may call (SPEC 17):
// their names, classes, descriptions and argument schemas (the catalogue
// offered to a model), the checking of the arguments a model sends, and
// the tool process that carries a run's calls out, one at a time (Main,
// the hidden command `ctxfs __tool`).
//
// The tool process runs as the session's uid, never as root, started by
// the agent package through the same trampolines as an agent's program
// (in the jail with isolation chroot): the kernel, not a path check here,
// keeps a call inside what that uid may reach. So nothing in this package
// decides who may do what, and nothing here is ever called by the server
// itself on a user's path: the server only parses arguments and speaks
// the protocol (protocol.go) with the process.
//
// Arguments come from a model, which may send anything: wrong types,
// unknown fields, NUL bytes, huge strings. Parse refuses each with an
// error the model reads; it never panics.
package tools

import (
	"encoding/json"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// The tool names, as ctxfs spells them (SPEC 17).
const (
	FSRead    = "fs.read"
	FSList    = "fs.list"
	FSStat    = "fs.stat"
	FSWrite   = "fs.write"
	FSReplace = "fs.replace"
	ShellExec = "shell.exec"
	AskUser   = "ask_user"
	// FSRemove is internal: a restore uses it to put back the absence of
	// a file. It is never offered to a model, and no definition names it.
	FSRemove = "fs.remove"
	// FSKeep is internal: it keeps a file's content (or its absence) and
	// changes nothing, before a CLI edits the file (SPEC 17: a CLI's
	// edit, where the host learns its path first).
	FSKeep = "fs.keep"
)

// Classes of tools: the perm letter that allows them (SPEC 17), and ask
// for ask_user, which every perm allows.
const (
	ClassRead  = 'r'
	ClassWrite = 'w'
	ClassExec  = 'x'
	ClassAsk   = '?'
)

// Bounds of a call (SPEC 17: 64 KiB per stream).
const (
	MaxOutput      = 64 << 10 // fs.read's content, and shell.exec's stdout and stderr, each
	MaxWrite       = 4 << 20  // fs.write's content, fs.replace's old and new
	MaxBefore      = 8 << 20  // a file a change keeps first: larger is EFBIG
	MaxEntries     = 1000     // fs.list's entries
	MaxPath        = 4096     // PATH_MAX
	MaxArgv        = 1024     // shell.exec's argv entries
	MaxCommand     = 128 << 10
	MaxArguments   = 3*MaxWrite + 64<<10 // the arguments' JSON text, escapes included
	DefaultTimeout = 30                  // shell.exec, seconds
	MaxTimeout     = 600
)

// spec is one tool of the catalogue.
type spec struct {
	name, description string
	class             byte
	params            string // JSON Schema of the arguments
}

// catalogue holds every tool a model may be offered, in SPEC order.
var catalogue = []spec{
	{FSRead, "Read a file. Relative paths are resolved in the run's working directory. Returns at most 64 KiB of content from offset (bytes), with truncated set when more follows.", ClassRead,
		`{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1,"maximum":65536}},"required":["path"],"additionalProperties":false}`},
	{FSList, "List a directory: each entry's name, type and size (at most 1000 entries, truncated set when there are more).", ClassRead,
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`},
	{FSStat, "Describe a file without following a final symlink: type, size, mode, modification time.", ClassRead,
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`},
	{FSWrite, "Create a file, or replace its whole content (at most 4 MiB).", ClassWrite,
		`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`},
	{FSReplace, "Replace an exact string in a file: old must occur exactly count times (default 1); each occurrence becomes new.", ClassWrite,
		`{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string","minLength":1},"new":{"type":"string"},"count":{"type":"integer","minimum":1}},"required":["path","old","new"],"additionalProperties":false}`},
	{ShellExec, "Run a command: argv (a program and its arguments) or command (a /bin/sh -c line), in the run's working directory. Returns exit_status, stdout and stderr (64 KiB each, truncated when cut). timeout in seconds: default 30, at most 600.", ClassExec,
		`{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"},"minItems":1},"command":{"type":"string"},"timeout":{"type":"integer","minimum":1,"maximum":600}},"additionalProperties":false}`},
	{AskUser, "Ask the person who runs this session a question and wait for the answer.", ClassAsk,
		`{"type":"object","properties":{"text":{"type":"string","minLength":1}},"required":["text"],"additionalProperties":false}`},
}

// internal are tools that exist for the server's own use, never offered.
var internal = []spec{
	{FSRemove, "Remove a file.", ClassWrite,
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`},
	{FSKeep, "Keep a file's content before another program changes it.", ClassWrite,
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`},
}

// lookup finds a tool of the catalogue, or an internal one when
// withInternal.
func lookup(name string, withInternal bool) (spec, bool) {
	for _, s := range catalogue {
		if s.name == name {
			return s, true
		}
	}
	if withInternal {
		for _, s := range internal {
			if s.name == name {
				return s, true
			}
		}
	}
	return spec{}, false
}

// Known reports whether name is a tool a definition may declare.
func Known(name string) bool { _, ok := lookup(name, false); return ok }

// Class is the class of a tool (ClassRead, ClassWrite, ClassExec,
// ClassAsk), 0 for an unknown name.
func Class(name string) byte {
	s, _ := lookup(name, true)
	return s.class
}

// Allowed reports whether perm (letters of "rwx") allows the tool name.
func Allowed(name, perm string) bool { return AllowedClass(Class(name), perm) }

// AllowedClass reports whether perm allows a tool of class c (0: none).
func AllowedClass(c byte, perm string) bool {
	if c == ClassAsk {
		return true
	}
	for i := 0; i < len(perm); i++ {
		if c != 0 && perm[i] == c {
			return true
		}
	}
	return false
}

// Specs are the tools named, as offered to a model, in the order given;
// an unknown or internal name is left out.
func Specs(names []string) []modelapi.Tool {
	var out []modelapi.Tool
	for _, n := range names {
		if s, ok := lookup(n, false); ok {
			out = append(out, modelapi.Tool{Name: s.name, Description: s.description, Parameters: json.RawMessage(s.params)})
		}
	}
	return out
}
