package clienv

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
)

// Describe renders err as "ERRNO: detail", the errno name first because
// that is what scripts match on (SPEC section 11: `ctx: send: EACCES`).
// A server message that starts with the command's op ("send: ...") loses
// it: the line already says "ctx: send:".
func Describe(cmd string, err error) string {
	var se *client.ServerError
	if errors.As(err, &se) {
		return (&client.ServerError{Code: se.Code, Message: strings.TrimPrefix(se.Message, cmd+": ")}).Error()
	}
	var de *client.DialError
	if errors.As(err, &de) && de.ServerDown() {
		return unreachable(de)
	}
	name := abi.ErrnoName(abi.Errno(err))
	s := withoutPaths(err)
	if strings.HasPrefix(s, name) {
		return s
	}
	return name + ": " + s
}

// withoutPaths is err's text with the paths of its file and socket errors
// cut to their last element: they are inside the mount, not what the user
// named, and the file's name is what tells (messages.jsonl, coder.sock).
func withoutPaths(err error) string {
	s := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		s = strings.ReplaceAll(s, pe.Path, filepath.Base(pe.Path))
	}
	var de *client.DialError
	if errors.As(err, &de) && de.Path != "" {
		s = strings.ReplaceAll(s, de.Path, filepath.Base(de.Path))
	}
	return s
}

// Fail prints `ctx: CMD: ERRNO: detail` and returns the exit status: 2 for
// bad usage, invalid names, refused requests and an unreachable server
// (the request never ran), code otherwise.
func Fail(e *Env, cmd string, err error, code int) int {
	if isUsage(err) {
		return UsageError(e, cmd, err.Error())
	}
	fmt.Fprintf(e.Stderr, "ctx: %s: %s\n", cmd, Describe(cmd, err))
	if neverRan(err) {
		return ExitUsage
	}
	return code
}

// neverRan reports whether err means the request was not carried out: the
// server refused it, could not be reached, or a local check refused a name
// before anything was sent.
func neverRan(err error) bool {
	var se *client.ServerError
	var de *client.DialError
	var ae *abi.Error
	return errors.As(err, &se) || errors.As(err, &de) ||
		errors.As(err, &ae) && ae.Errno == syscall.EINVAL
}
