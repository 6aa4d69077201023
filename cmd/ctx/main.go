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
//
// This package is the wiring only: the command table (commands.go), the
// cobra tree built from it (cli.go), shell completion and main. The
// commands live by job under internal/cli (send, chat, inspect, sessions,
// doctor; clienv and transcript are what they share); a command's
// behaviour never belongs here.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

func main() {
	e := &clienv.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Uid: os.Getuid(),
		Interrupt: func() (context.Context, context.CancelFunc) {
			return signal.NotifyContext(context.Background(), os.Interrupt)
		},
	}
	os.Exit(run(e, os.Args[1:]))
}

// run parses argv (without the program name) with the CLI built from the
// command table, runs the command and returns its exit status.
func run(e *clienv.Env, argv []string) int {
	root := newCLI(e)
	root.SetArgs(append([]string{}, argv...)) // never nil: nil means os.Args
	_, err := root.ExecuteC()
	var status exitStatus
	var bad *badUsage
	switch {
	case err == nil:
		return clienv.ExitOK
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &bad):
		e.CmdPath = bad.path
		return clienv.UsageError(e, bad.name, bad.msg)
	}
	// cobra's own refusals (a bad completion request, say) are usage too.
	return clienv.UsageError(e, "", err.Error())
}
