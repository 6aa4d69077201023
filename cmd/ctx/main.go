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
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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

// run dispatches argv (without the program name) and returns the exit status.
func run(e *env, argv []string) int {
	if len(argv) == 0 {
		fmt.Fprint(e.stderr, usageText())
		return exitUsage
	}
	switch argv[0] {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(e.stdout, usageText())
		return exitOK
	case "agent":
		return runAgent(e, argv[1:])
	case "doctor":
		return runDoctorArgs(e, argv[1:])
	}
	return usageError(e, "", fmt.Sprintf("unknown command %q", argv[0]))
}

// runAgent finds the agent subcommand (one or two words: "send",
// "session list") and runs it.
func runAgent(e *env, argv []string) int {
	if len(argv) == 0 || isHelp(argv[0]) {
		w, code := e.stdout, exitOK
		if len(argv) == 0 {
			w, code = e.stderr, exitUsage
		}
		fmt.Fprint(w, usageText())
		return code
	}
	cmd, rest := findCommand(argv)
	if cmd == nil {
		return notBuilt(e, argv)
	}
	p, err := parseArgs(cmd.flags, rest)
	if err == errHelp {
		fmt.Fprintf(e.stdout, "usage: %s\n%s", cmd.synopsis(), cmd.help)
		return exitOK
	}
	if err == nil {
		err = cmd.checkArgs(p)
	}
	if err != nil {
		return usageError(e, cmd.name, err.Error())
	}
	return cmd.run(e, p)
}

func isHelp(a string) bool {
	return a == "help" || a == "-h" || a == "--help" || a == "-help"
}

// notBuilt answers the SPEC section 11 commands that this ctx does not
// have yet, so that they fail plainly rather than as "unknown".
func notBuilt(e *env, argv []string) int {
	var known []string
	for _, k := range known {
		if strings.Join(argv[:min(len(argv), len(strings.Fields(k)))], " ") == k {
			fmt.Fprintf(e.stderr, "ctx: %s: ENOSYS: not implemented yet\n", k)
			return exitUsage
		}
	}
	return usageError(e, "", fmt.Sprintf("unknown command \"agent %s\"", argv[0]))
}

// usageError reports bad usage: the problem, then where to look.
func usageError(e *env, cmd, msg string) int {
	prefix := "ctx: "
	if cmd != "" {
		prefix += cmd + ": "
	}
	fmt.Fprintf(e.stderr, "%s%s\nrun 'ctx help' for usage\n", prefix, msg)
	return exitUsage
}

func usageText() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n", c.synopsis())
	}
	b.WriteString(`
The mount root is $CTX_ROOT (default /ctx). Without --session a command uses
the agent's index/current session, else "default". --shared SPACE selects the
shared space SPACE instead of your home (same as --scope shared --space SPACE).

send prints the assistant text as it streams; INPUT words are joined with
spaces and an INPUT of - is read from stdin. Exit status: 0 ok, 1 the run
failed or was cancelled, 2 bad usage or a refused request (the errno name is
printed on stderr), 130 interrupted: Ctrl+C only detaches, the run goes on
(ctx agent cancel AGENT RUN stops it). A repeated --id is a replay.

chat (or repl) sends each line as one send; there Ctrl+C cancels the run
that is streaming. /help at its prompt lists its commands.
`)
	return b.String()
}
