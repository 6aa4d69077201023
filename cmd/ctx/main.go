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
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	uid            int
	// interrupt returns a context cancelled by SIGINT, for commands that
	// wait on the server; file commands keep the default SIGINT behaviour.
	interrupt func() (context.Context, context.CancelFunc)
	// cmdPath is the running command after "ctx" ("agent send"), for
	// the pointer to its help after a usage error.
	cmdPath string
}

func main() {
	e := &env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, uid: os.Getuid(),
		interrupt: func() (context.Context, context.CancelFunc) {
			return signal.NotifyContext(context.Background(), os.Interrupt)
		},
	}
	os.Exit(run(e, os.Args[1:]))
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// run parses argv (without the program name) with the CLI built from the
// command table, runs the command and returns its exit status.
func run(e *env, argv []string) int {
	root := newCLI(e)
	root.SetArgs(append([]string{}, argv...)) // never nil: nil means os.Args
	_, err := root.ExecuteC()
	var status exitStatus
	var bad *badUsage
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &bad):
		e.cmdPath = bad.path
		return usageError(e, bad.name, bad.msg)
	}
	// cobra's own refusals (a bad completion request, say) are usage too.
	return usageError(e, "", err.Error())
}

// usageError reports bad usage: the problem, then where to look.
func usageError(e *env, cmd, msg string) int {
	prefix := "ctx: "
	if cmd != "" {
		prefix += cmd + ": "
	}
	fmt.Fprintf(e.stderr, "%s%s\n%s\n", prefix, msg, helpHint(e.cmdPath))
	return exitUsage
}

// helpHint points to the help of the command at path (the words after
// "ctx"), or of ctx itself.
func helpHint(path string) string {
	if path == "" {
		return "run 'ctx --help' for usage"
	}
	return "run 'ctx " + path + " --help' for usage"
}
