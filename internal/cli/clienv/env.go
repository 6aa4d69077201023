package clienv

import (
	"context"
	"fmt"
	"io"
)

// Env is everything a command may touch, so that tests can run commands
// in-process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Uid            int
	// interrupt returns a context cancelled by SIGINT, for commands that
	// wait on the server; file commands keep the default SIGINT behaviour.
	Interrupt func() (context.Context, context.CancelFunc)
	// cmdPath is the running command after "ctx" ("agent send"), for
	// the pointer to its help after a usage error.
	CmdPath string
}

// UsageError reports bad usage: the problem, then where to look.
func UsageError(e *Env, cmd, msg string) int {
	prefix := "ctx: "
	if cmd != "" {
		prefix += cmd + ": "
	}
	fmt.Fprintf(e.Stderr, "%s%s\n%s\n", prefix, msg, helpHint(e.CmdPath))
	return ExitUsage
}

// helpHint points to the help of the command at path (the words after
// "ctx"), or of ctx itself.
func helpHint(path string) string {
	if path == "" {
		return "run 'ctx --help' for usage"
	}
	return "run 'ctx " + path + " --help' for usage"
}

// Exit statuses.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)
