package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/internal/bashcomp"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// The cobra tree is built from the command table for each run, so that
// every command closes over the env it runs in (in-process tests use their
// own). cobra parses and checks the line and prints help; the run
// functions keep reporting errors themselves and return their exit status.

// exitStatus carries a run function's exit status out of cobra. The
// command has already said on stderr why it is not 0.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// badUsage is a command line that the CLI refused before anything ran:
// exit 2, with a pointer to the help of path (the words after "ctx").
type badUsage struct {
	name string // the command as error lines name it ("send", "session list"); "" for a group
	path string
	msg  string
}

func (u *badUsage) Error() string { return u.msg }

// groupShort describes the command groups.
var groupShort = map[string]string{
	"agent":         "Talk to agents and read their sessions",
	"agent session": "List, archive and collect an agent's sessions",
}

func newCLI(e *clienv.Env) *cobra.Command {
	root := &cobra.Command{
		Use:               "ctx",
		Short:             "The client of ctxfs: send to agents, read their sessions",
		Long:              overview(),
		Version:           versionString(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true, // man pages stay the same from build to build
	}
	root.SetVersionTemplate("ctx {{.Version}}\n")
	// A group runs only to refuse a bare or unknown command: its usage
	// shows "ctx agent [command]", not a line of its own.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"Usage:{{if .Runnable}}", "Usage:{{if not .HasAvailableSubCommands}}", 1))
	root.SetIn(e.Stdin)
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	groups := map[string]*cobra.Command{"": root}
	for _, c := range commands {
		parent := groupFor(groups, c)
		parent.AddCommand(leafCommand(e, c))
	}
	// Now, so that it is a group like the others; its bash script needs no
	// bash-completion package.
	bashcomp.Install(root)
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		groups["completion"] = comp
	}
	for path, g := range groups {
		makeGroup(e, g, path)
	}
	for _, extra := range extraCommands {
		root.AddCommand(extra(root, "ctx "+versionString()))
	}
	return root
}

// extraCommands are added by files built with tags (genman.go: the man
// page generator, for make man, which released binaries do not carry).
var extraCommands []func(root *cobra.Command, source string) *cobra.Command

// groupFor is the cobra command c goes under, making the groups on its
// path ("agent", "agent session") as needed.
func groupFor(groups map[string]*cobra.Command, c *command) *cobra.Command {
	words := strings.Fields(c.path())
	parent, path := groups[""], ""
	for _, w := range words[:len(words)-1] {
		path = strings.TrimSpace(path + " " + w)
		g := groups[path]
		if g == nil {
			g = &cobra.Command{Use: w, Short: groupShort[path]}
			groups[path] = g
			parent.AddCommand(g)
		}
		parent = g
	}
	return parent
}

// makeGroup gives a group (ctx, ctx agent, ctx agent session) its own
// "help TOPIC" and makes a bare or mistyped group an error rather than
// cobra's help with exit 0: `ctx agent` alone is usage on stderr, exit 2;
// `ctx agent sned` is an unknown command with what it may have meant.
// Unknown flags are left for that check: `ctx agent sned --json` is about
// the command, not the flag.
func makeGroup(e *clienv.Env, g *cobra.Command, path string) {
	g.Args = cobra.ArbitraryArgs
	g.SuggestionsMinimumDistance = 2
	g.FParseErrWhitelist.UnknownFlags = true
	g.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			fmt.Fprint(e.Stderr, cmd.UsageString())
			return exitStatus(clienv.ExitUsage)
		}
		return unknownCommand(cmd, path, args[0])
	}
	h := helpCommand(g)
	g.SetHelpCommand(h)
	if path != "" { // the root adds its own when it runs
		g.AddCommand(h)
	}
}

// unknownCommand refuses word under group g, naming the commands it may
// have meant. At the top, the agent commands count too: `ctx send` means
// `ctx agent send`.
func unknownCommand(g *cobra.Command, path, word string) *badUsage {
	full := strings.TrimSpace(path + " " + word)
	var maybe []string
	for _, s := range g.SuggestionsFor(word) {
		maybe = append(maybe, strings.TrimSpace(path+" "+s))
	}
	if path == "" {
		if agent, _, err := g.Find([]string{"agent"}); err == nil && agent != g {
			for _, s := range agent.SuggestionsFor(word) {
				maybe = append(maybe, "agent "+s)
			}
		}
	}
	msg := fmt.Sprintf("unknown command %q", full)
	seen := map[string]bool{}
	for _, m := range maybe {
		if seen[m] {
			continue
		}
		if len(seen) == 0 {
			msg += "; did you mean"
		} else {
			msg += " or"
		}
		seen[m] = true
		msg += fmt.Sprintf(" %q?", "ctx "+m)
	}
	return &badUsage{path: path, msg: msg}
}

// helpCommand is `help [COMMAND]` of group g: the help of a command of
// the group, or of the group itself. At the top, a name that is not a
// top-level command is looked up among the agent commands, so that
// `ctx help send` is `ctx agent send --help`.
func helpCommand(g *cobra.Command) *cobra.Command {
	h := &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Show the help of a command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			target, err := helpTopic(g, args)
			if err != nil {
				return err
			}
			target.InitDefaultHelpFlag() // listed as --help lists them
			target.InitDefaultVersionFlag()
			return target.Help()
		},
	}
	h.FParseErrWhitelist.UnknownFlags = true // ctx help send --json: the flags of the topic
	return h
}

func helpTopic(g *cobra.Command, args []string) (*cobra.Command, error) {
	target, rest, err := g.Find(args)
	if err != nil {
		target, rest = g, args
	}
	if target == g && !g.HasParent() && len(positional(rest)) > 0 {
		if t, r, err := g.Find(append([]string{"agent"}, args...)); err == nil && t.Name() != "agent" {
			target, rest = t, r
		}
	}
	words := positional(rest)
	if len(words) == 0 {
		return target, nil
	}
	bad := unknownCommand(target, pathOf(target), words[0])
	bad.name = "help"
	return nil, bad
}

// positional drops the flags from words.
func positional(words []string) []string {
	var out []string
	for _, w := range words {
		if !strings.HasPrefix(w, "-") {
			out = append(out, w)
		}
	}
	return out
}

// pathOf is a command's words after "ctx".
func pathOf(c *cobra.Command) string {
	return strings.TrimSpace(strings.TrimPrefix(c.CommandPath(), c.Root().Name()))
}

// leafCommand makes the cobra command of one table entry.
func leafCommand(e *clienv.Env, c *command) *cobra.Command {
	cc := &cobra.Command{
		Use:     strings.TrimSpace(c.leaf() + " " + c.posNames),
		Aliases: c.aliases,
		Short:   c.shortHelp(),
		Long:    c.help,
		Example: indent(c.examples),
		Args:    argCount(c),
		RunE: func(cmd *cobra.Command, args []string) error {
			e.CmdPath = c.path()
			if code := c.run(e, parsedFrom(cmd.Flags(), c.flags, args)); code != clienv.ExitOK {
				return exitStatus(code)
			}
			return nil
		},
		ValidArgsFunction: completeArgs(e, c),
	}
	cc.Flags().SortFlags = false // table order: the common ones first
	for _, f := range c.flags {
		f.define(cc.Flags())
	}
	cc.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		msg := err.Error()
		if c.takesInput() && strings.Contains(msg, "unknown") {
			msg += " (an INPUT that starts with - goes after --)"
		}
		return &badUsage{name: c.name, path: c.path(), msg: msg}
	})
	completeFlags(e, c, cc)
	return cc
}

// argCount checks the number of positional arguments against the table.
func argCount(c *command) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		n := len(args)
		var msg string
		switch {
		case n < c.minArgs:
			msg = "missing " + strings.Trim(strings.Join(strings.Fields(c.posNames)[n:c.minArgs], " "), ".")
		case c.maxArgs >= 0 && n > c.maxArgs:
			msg = fmt.Sprintf("too many arguments (%d, at most %d)", n, c.maxArgs)
		default:
			return nil
		}
		return &badUsage{name: c.name, path: c.path(), msg: msg + "; usage: " + c.synopsis()}
	}
}

// indent sets example lines off by two spaces, as cobra's help shows them.
func indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// overview is the long help of ctx itself: every command's synopsis, then
// what they share.
func overview() string {
	var b strings.Builder
	b.WriteString("ctx is the client of ctxfs. Its commands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n", c.synopsis())
	}
	b.WriteString(`
The mount root is $CTX_ROOT (default /ctx). Without --session a command uses
the agent's index/current session, else "default". --shared SPACE selects the
shared space SPACE instead of your home (same as --scope shared --space SPACE).

Exit status: 0 ok; 1 the run failed or was cancelled, or the command's own
operation failed (a missing session, a cancel that found nothing running);
2 bad usage, a refused request (its errno name on stderr) or an unreachable
server; 130 interrupted. Ctrl+C on a send only detaches: the run goes on
(ctx agent attach AGENT RUN follows it again, ctx agent cancel AGENT RUN
stops it).

ctx help COMMAND (or ctx agent COMMAND --help) shows a command's flags and
examples; ctx completion bash|zsh|fish prints a shell completion script.`)
	return b.String()
}
