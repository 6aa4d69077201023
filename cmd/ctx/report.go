package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
)

// describe renders err as "ERRNO: detail", the errno name first because
// that is what scripts match on (SPEC section 11: `ctx: send: EACCES`).
// A server message that starts with the command's op ("send: ...") loses
// it: the line already says "ctx: send:".
func describe(cmd string, err error) string {
	var se *client.ServerError
	if errors.As(err, &se) {
		return (&client.ServerError{Code: se.Code, Message: strings.TrimPrefix(se.Message, cmd+": ")}).Error()
	}
	var de *client.DialError
	if errors.As(err, &de) && de.ServerDown() {
		name := abi.ErrnoName(abi.Errno(de.Err))
		if name == "ENOENT" {
			return fmt.Sprintf("ENOENT: no socket %s: is ctxfs running? (ctxfs mount) Is the agent defined?", de.Path)
		}
		return name + ": is ctxfs running? (ctxfs mount)"
	}
	name := abi.ErrnoName(abi.Errno(err))
	s := err.Error()
	if strings.HasPrefix(s, name) {
		return s
	}
	return name + ": " + s
}

// fail prints `ctx: CMD: ERRNO: detail` and returns the exit status: 2 for
// bad usage, invalid names, refused requests and an unreachable server
// (the request never ran), code otherwise.
func fail(e *env, cmd string, err error, code int) int {
	if isUsage(err) {
		return usageError(e, cmd, err.Error())
	}
	fmt.Fprintf(e.stderr, "ctx: %s: %s\n", cmd, describe(cmd, err))
	if neverRan(err) {
		return exitUsage
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
