// Command ctx is the client CLI of ctxfs (SPEC section 11). It talks to the
// server only through the mounted files and the agent sockets under the
// mount root ($CTX_ROOT, default /ctx).
//
// Exit status: 0 success; 1 the run failed or was cancelled, or a
// command's own operation failed (a file could not be read, a cancel found
// nothing running); 2 bad usage, a refused request or an unreachable
// server; 130 interrupted by SIGINT. Interrupting `ctx agent send` only
// detaches: closing the connection does not stop the run (SPEC section 7);
// `ctx agent cancel AGENT RUN` does.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// env is everything a command may touch, so that tests can run commands
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

func main() {
	e := &Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Uid: os.Getuid(),
		Interrupt: func() (context.Context, context.CancelFunc) {
			return signal.NotifyContext(context.Background(), os.Interrupt)
		},
	}
	os.Exit(run(e, os.Args[1:]))
}

// Exit statuses.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// run parses argv (without the program name) with the CLI built from the
// command table, runs the command and returns its exit status.
func run(e *Env, argv []string) int {
	root := newCLI(e)
	root.SetArgs(append([]string{}, argv...)) // never nil: nil means os.Args
	_, err := root.ExecuteC()
	var status exitStatus
	var bad *badUsage
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &bad):
		e.CmdPath = bad.path
		return UsageError(e, bad.name, bad.msg)
	}
	// cobra's own refusals (a bad completion request, say) are usage too.
	return UsageError(e, "", err.Error())
}

// usageError reports bad usage: the problem, then where to look.
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
