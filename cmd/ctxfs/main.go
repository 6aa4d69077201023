// Command ctxfs is the ctxfs server: it mounts <root>/home and
// <root>/shared, serves the agent and model sockets, and runs agents. It
// also verifies stores (fsck) and creates shared spaces. Called as
// mount.fuse.ctxfs it is the mount(8) helper that makes an /etc/fstab
// line work (mounthelper.go).
//
// Exit status: 0 done, 1 failed, 2 bad usage; fsck has its own (fsck.go);
// the mount helper uses mount(8)'s (mounthelper.go).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/permitmcp"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/internal/bashcomp"
)

func main() {
	surviveClosedOutput()
	if isMountHelper(os.Args[0]) {
		os.Exit(mountHelperMain(os.Args[1:]))
	}
	root := newRootCommand()
	root.SetArgs(os.Args[1:])
	cmd, err := root.ExecuteC()
	os.Exit(report(cmd, err))
}

// surviveClosedOutput keeps ctxfs alive when its stdout or stderr is a
// pipe whose reader is gone (`make run 2>&1 | tee log`, then Ctrl+C: tee
// dies first). Go's runtime otherwise kills the process with SIGPIPE at its
// next write to fd 1 or 2: a server logging "stopping" died with its mounts
// left dead, and a watchdog reporting what it cleaned died half-way. With
// SIGPIPE notified, such a write fails with EPIPE, which the log ignores,
// and the stop goes on. Notify rather than Ignore: an ignored SIGPIPE would
// be inherited by every program the server runs (agents, jails), while a
// handled one is reset to the default at exec.
func surviveClosedOutput() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // never read: the signals are dropped
}

// report prints a command's error as `ctxfs: …` and returns the exit
// status it means.
func report(cmd *cobra.Command, err error) int {
	var status exitStatus
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &usage):
		if cmd.Name() == "help" { // a topic it does not know: ctxfs's own help lists them
			cmd = cmd.Root()
		}
		fmt.Fprintf(os.Stderr, "ctxfs: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return 2
	}
	fmt.Fprintf(os.Stderr, "ctxfs: %v\n", err)
	return 1
}

// usageError is a command line that asks for nothing ctxfs does: exit 2.
type usageError string

func (u usageError) Error() string { return string(u) }

// exitStatus ends the command with this status, having printed what it
// had to (fsck's 1 and 2).
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// newRootCommand builds the command tree.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ctxfs",
		Short: "The ctxfs server: AI-agent sessions as a live /ctx file tree",
		Long: `ctxfs serves AI-agent sessions as ordinary-looking files. "ctxfs mount"
mounts ROOT/home and ROOT/shared (two FUSE mounts, one process), listens on
the agent and model sockets under ROOT/agent and ROOT/model, and runs agents;
"ctxfs umount" stops it. Users talk to it with the ctx command or through the
files themselves.

Defaults: the root is $CTX_ROOT or /ctx; the store is $CTXFS_STORE, else
/var/lib/ctxfs for root and $XDG_DATA_HOME/ctxfs (~/.local/share/ctxfs) for
other users.`,
		Example: `  ctxfs mount                       # serve /ctx from /var/lib/ctxfs, in the background
  ctxfs mount --foreground          # stay attached, log on stderr (systemd)
  ctxfs umount
  ctxfs fsck --store /var/lib/ctxfs
  ctxfs help mount`,
		Version:       version(),
		Args:          unknownSubcommand,
		RunE:          missingSubcommand,
		SilenceErrors: true, // report prints them, as ctxfs: …
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err.Error()) })
	root.SuggestionsMinimumDistance = 2
	root.AddCommand(newMountCommand(), newUmountCommand(), newFsckCommand(), newSpaceCommand(),
		newCleanStaleCommand(), newVersionCommand())
	root.AddCommand(newClusterCommand())
	root.AddCommand(internalCommands()...)
	for _, extra := range extraCommands {
		root.AddCommand(extra(root, version()))
	}
	root.SetHelpCommand(newHelpCommand())
	bashcomp.Install(root) // a script that needs no bash-completion package
	return root
}

// extraCommands are added by files built with tags (genman.go).
var extraCommands []func(root *cobra.Command, version string) *cobra.Command

// unknownSubcommand refuses an argument where a command of cmd's was
// expected, with cobra's "did you mean".
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknownCommand(cmd, args[0])
}

func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return usageError(msg)
}

// missingSubcommand is what a command that only groups others does when
// run alone: its help, on stderr, and exit 2.
func missingSubcommand(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(os.Stderr)
	cmd.Help()
	return exitStatus(2)
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("%s takes no arguments (got %q)", commandName(cmd), args[0]))
	}
	return nil
}

// commandName is cmd's path below ctxfs ("space add"), for messages that
// report prints after "ctxfs: ".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// exactArgs refuses any other number of positional arguments than n,
// naming what they are.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError(fmt.Sprintf("%s takes %s", commandName(cmd), what))
		}
		return nil
	}
}

// newHelpCommand is `ctxfs help [COMMAND...]`: cobra's, except that an
// unknown topic is a usage error with suggestions rather than the root's
// help and exit 0.
func newHelpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]...",
		Short: "Help about any command",
		Long:  "Help prints the help of a command, or of ctxfs itself.",
		Example: `  ctxfs help mount
  ctxfs help space add`,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			parent, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range parent.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			switch {
			case err != nil:
				return usageError(err.Error())
			case len(rest) > 0:
				return unknownCommand(cmd, rest[0])
			case cmd.Hidden:
				return unknownCommand(cmd.Parent(), cmd.Name())
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// internalCommands are started by the server itself, never by people:
// hidden from help and completion, and given their arguments raw, as
// before (each parses its own).
func internalCommands() []*cobra.Command {
	raw := func(name string, run func(args []string) error) *cobra.Command {
		return &cobra.Command{
			Use: name, Hidden: true, DisableFlagParsing: true,
			RunE: func(_ *cobra.Command, args []string) error { return run(args) },
		}
	}
	exit := func(main func([]string) int) func([]string) error {
		return func(args []string) error { os.Exit(main(args)); return nil }
	}
	return []*cobra.Command{
		raw("watchdog", cmdWatchdog),                             // started by the server, see watchdog.go
		raw(trampoline.EnterCommand, exit(trampoline.EnterMain)), // how a run enters its directory (agent.Enter)
		raw(trampoline.JailCommand, exit(trampoline.JailMain)),   // how a chroot-isolated run is jailed (agent.Jail)
		raw(agent.ToolCommand, exit(tools.Main)),                 // a model run's tool process, serving its calls (agent.ExecTool)
		raw(permitmcp.PermitCommand, exit(permitmcp.PermitMain)), // a CLI's permission prompt tool (cli.Permit)
	}
}

// defaultRoot is $CTX_ROOT or /ctx.
func defaultRoot() string { return abi.RootFromEnv(os.Getenv) }

// defaultStore is $CTXFS_STORE, else /var/lib/ctxfs for root and
// $XDG_DATA_HOME/ctxfs for everyone else.
func defaultStore() string { return abi.DefaultStore(os.Geteuid(), os.Getenv) }

// absOr returns path, or def when path is "", as an absolute path.
func absOr(path, def string) (string, error) {
	if path == "" {
		path = def
	}
	return filepath.Abs(path)
}

// Help texts of the flags more than one command takes.
const (
	rootFlagHelp  = "the mount root `DIR`: ROOT/home and ROOT/shared are mounted, ROOT/agent and ROOT/model hold the definitions and sockets (default $CTX_ROOT, else /ctx)"
	storeFlagHelp = "the store: the `DIR` that holds the sessions (default $CTXFS_STORE, else /var/lib/ctxfs for root and $XDG_DATA_HOME/ctxfs for other users)"
)
