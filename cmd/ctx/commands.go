package main

import (
	"fmt"
	"strings"
)

// command is one `ctx agent ...` subcommand.
type command struct {
	name     string // "send", "session list"
	aliases  []string
	posNames string // positional synopsis, e.g. "AGENT INPUT..."
	minArgs  int
	maxArgs  int // -1: no limit
	flags    []flagDef
	flagHelp string // flag synopsis, e.g. "[--session S] [--json]"
	help     string
	run      func(*env, *parsed) int
}

var (
	fSession = flagDef{name: "session", value: true}
	fShared  = flagDef{name: "shared", value: true}
	fScope   = flagDef{name: "scope", value: true}
	fSpace   = flagDef{name: "space", value: true}
	fJSON    = flagDef{name: "json"}
)

// commands lists the subcommands, in the order usage shows them.
var commands = []*command{
	{name: "send", posNames: "AGENT INPUT...", minArgs: 2, maxArgs: -1,
		flags:    []flagDef{fSession, fScope, fSpace, fShared, {name: "cwd", value: true}, {name: "id", value: true}, fJSON},
		flagHelp: "[--session S] [--scope private|shared|temp] [--space N] [--shared SPACE] [--cwd P] [--id C] [--json]",
		help:     "Sends INPUT to AGENT and prints the answer as it streams (--json: the raw frames).\n",
		run:      runSend},
	{name: "chat", aliases: []string{"repl"}, posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared},
		flagHelp: "[--session S] [--shared SPACE]",
		help: `Sends each line you type to AGENT and prints the answers as they stream;
repl is another name for it. Ctrl+C while an answer streams cancels that run;
Ctrl+C or Ctrl+D at an empty prompt leaves. Lines that start with / are
commands: /session [NAME], /history, /help, /exit (//TEXT sends /TEXT).
Without a terminal it reads lines from stdin, one send each; the exit status
is then 0 when every run was ok, 1 if one failed or was cancelled, 2 if a
request was refused or a command was bad, 130 after Ctrl+C (which cancels the
streaming run, then ends the chat).
`,
		run: runChat},
	{name: "history", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--json]",
		help:     "Prints the session's messages as a transcript (--json: messages.jsonl as is).\n",
		run:      runHistory},
	{name: "output", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared},
		flagHelp: "[--session S] [--shared SPACE]",
		help:     "Prints latest.md, the text of the latest assistant message.\n",
		run:      runOutput},
	{name: "status", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fScope, fSpace, fShared, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--scope S --space N] [--json]",
		help:     "Asks the server for the session's state and its queued and running runs.\n",
		run:      runStatus},
	{name: "cancel", posNames: "AGENT RUN-OR-CLIENT-ID", minArgs: 2, maxArgs: 2,
		help: "Cancels one run, named by its run id or by the client id of its send.\nExit 0 when it was cancelled, 1 when it was not running (stale).\n",
		run:  runCancel},
	{name: "runs", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared, {name: "grep", value: true}, {name: "interrupted"}, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--grep WORD] [--interrupted] [--json]",
		help:     runsHelp,
		run:      runRuns},
	{name: "search", posNames: "AGENT QUERY...", minArgs: 2, maxArgs: -1,
		flags:    []flagDef{fSession, fShared, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--json]",
		help:     searchHelp,
		run:      runSearch},
	{name: "usage", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared, {name: "since", value: true}, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--since DAYS] [--json]",
		help:     usageHelp,
		run:      runUsage},
	{name: "trajectory", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fSession, fShared},
		flagHelp: "[--session S] [--shared SPACE]",
		help:     "Prints the session as one ATIF v1.7 document (JSON), only when it validates.\nExit 1 when it is refused (EINVAL) or the session has no messages (ENODATA).\n",
		run:      runTrajectory},
	{name: "session list", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags:    []flagDef{fShared, fJSON},
		flagHelp: "[--shared SPACE] [--json]",
		help:     "Prints the agent's sessions, most recently updated first (--json: one object\nper session: name, state, updated_at, created_at, meta.json's persona fields).\n",
		run:      runSessionList},
	{name: "session archive", posNames: "AGENT SESSION", minArgs: 2, maxArgs: 2,
		flags:    []flagDef{fShared, {name: "archive-dir", value: true}},
		flagHelp: "[--shared SPACE] [--archive-dir ABS]",
		help:     "Moves one session, whole, to archived_sessions/AGENT/ (or ABS/AGENT/).\nA protected session (index, default, current, active, unreadable state) is refused: EBUSY.\nAn existing target is EEXIST; a target on another filesystem EXDEV (nothing is copied).\n",
		run:      runSessionArchive},
	{name: "session gc", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fShared, {name: "pattern", value: true}, {name: "older-than-days", value: true},
			{name: "keep", value: true}, {name: "yes"}, {name: "delete"}, {name: "archive-dir", value: true}},
		flagHelp: "[--pattern GLOB]... [--older-than-days N] [--keep NAME]... [--yes] [--delete] [--archive-dir ABS] [--shared SPACE]",
		help:     "Archives (or with --delete deletes) the sessions whose names match a pattern\n(default: *smoke* e2e-* repro-* install-* deterministic-* ansi-* spark-* temp-*).\nWithout --yes it only prints what it would do, and writes nothing.\n",
		run:      runSessionGC},
	{name: "attach", aliases: []string{"resume"}, posNames: "AGENT [RUN]", minArgs: 1, maxArgs: 2,
		flags:    []flagDef{fSession, fScope, fSpace, fShared, fJSON},
		flagHelp: "[--session S] [--shared SPACE] [--scope temp] [--json]",
		help:     attachHelp,
		run:      runAttach},
	{name: "list", posNames: "", minArgs: 0, maxArgs: 0,
		flags:    []flagDef{fJSON},
		flagHelp: "[--json]",
		help:     agentListHelp,
		run:      runAgentList},
}

func (c *command) synopsis() string {
	s := "ctx agent " + c.name + " " + c.posNames
	if c.flagHelp != "" {
		s += " " + c.flagHelp
	}
	return s
}

func (c *command) checkArgs(p *parsed) error {
	n := len(p.args)
	if n < c.minArgs || c.maxArgs >= 0 && n > c.maxArgs {
		return fmt.Errorf("usage: %s", c.synopsis())
	}
	return nil
}

// findCommand matches the longest command name or alias at the start of
// argv.
func findCommand(argv []string) (*command, []string) {
	var best *command
	bestLen := 0
	for _, c := range commands {
		for _, name := range append([]string{c.name}, c.aliases...) {
			words := strings.Fields(name)
			if len(words) <= len(argv) && strings.Join(argv[:len(words)], " ") == name && len(words) > bestLen {
				best, bestLen = c, len(words)
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	return best, argv[bestLen:]
}
