package main

import (
	"strings"

	"github.com/ctxfs/ctxfs/internal/cli/agentadd"
	"github.com/ctxfs/ctxfs/internal/cli/approval"
	"github.com/ctxfs/ctxfs/internal/cli/chat"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/cli/cliimport"
	"github.com/ctxfs/ctxfs/internal/cli/doctor"
	"github.com/ctxfs/ctxfs/internal/cli/inspect"
	"github.com/ctxfs/ctxfs/internal/cli/send"
	"github.com/ctxfs/ctxfs/internal/cli/sessions"
)

// command is one `ctx agent ...` subcommand, or with top a `ctx ...`
// command. The CLI (cli.go) is built from this table: one cobra command per
// entry, "session list" under a "session" group. Every field after run is
// optional.
type command struct {
	name     string // "send", "session list"; with top, the word after ctx
	aliases  []string
	posNames string // positional synopsis, e.g. "AGENT INPUT..."; AGENT and SESSION words complete
	minArgs  int
	maxArgs  int // -1: no limit
	flags    []flagDef
	help     string // the description --help shows; its first sentence is the short one
	run      func(*clienv.Env, *clienv.Parsed) int

	top      bool   // `ctx NAME` rather than `ctx agent NAME` (doctor, version)
	short    string // one line for command lists; "" takes help's first sentence
	examples string // command lines, one a line, for --help and the man page
	flagHelp string // the flag synopsis; "" builds it from flags
}

var (
	fSession = flagDef{name: "session", value: true, usage: "the session `S` (default: index/current, else \"default\")"}
	fShared  = flagDef{name: "shared", value: true, usage: "use the shared space `SPACE` instead of your home"}
	fScope   = flagDef{name: "scope", value: true, usage: "the session's scope: `private|shared|temp` (default private)"}
	fSpace   = flagDef{name: "space", value: true, usage: "the shared space `N` (implies --scope shared)"}
	fJSON    = flagDef{name: "json", usage: "print JSON"}
	fArchDir = flagDef{name: "archive-dir", value: true, usage: "archive to `ABS`/AGENT/ instead of archived_sessions/AGENT/ (an absolute path)"}
	fApprove = flagDef{name: "approve", value: true, repeat: true, usage: "allow once each call of the tool `TOOL` that waits for approval (fs.write, shell.exec, …)"}
)

// commands lists the subcommands, in the order usage shows them.
var commands = []*command{
	{name: "send", posNames: "AGENT INPUT...", minArgs: 2, maxArgs: -1,
		flags: []flagDef{fSession, fScope, fSpace, fShared,
			{name: "cwd", value: true, usage: "the run's working directory `P`, inside the agent's root (default: the agent's cwd, else /)"},
			{name: "id", value: true, usage: "the client id `C`: sending again with the same id and input is a replay"},
			fApprove, fJSON.with("print the raw reply frames as JSON lines")},
		short: "Send INPUT to AGENT and print the answer as it streams",
		help: `Sends INPUT to AGENT and prints the answer as it streams. AGENT may be a
model, PROVIDER/MODEL (as in every ctx agent command). INPUT words are
joined with spaces; an INPUT of - is read from stdin; an empty INPUT is
refused (EINVAL). An INPUT that starts with - goes after --. Exit status: 0 ok, 1 the run failed or was cancelled
(or the connection fell too far behind it: attach follows it again),
2 bad usage or a refused request (its errno on stderr), 130 interrupted:
Ctrl+C only detaches, the run goes on (ctx agent attach AGENT RUN follows it
again, ctx agent cancel AGENT RUN stops it). On a terminal the run id goes to
stderr, and tool calls and results show as one line each. A call that waits
for approval or a question (an agent with approval ask, its ask_user tool)
is shown on stderr with the ctx agent approve or answer command that
answers it, and the answer goes on streaming; --approve TOOL answers the
calls of TOOL itself (allow once).
`,
		examples: `ctx agent send coder 'fix the failing test'
git diff | ctx agent send coder 'review this:' -
ctx agent send debug/echo hello
ctx agent send coder --session review --json 'summarize' | jq -r 'select(.type=="delta").text'
ctx agent send coder --approve fs.write --approve fs.replace 'fix the typo in README.md'`,
		run: send.Send},
	{name: "chat", aliases: []string{"repl"}, posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fShared, fApprove},
		short: "Talk with AGENT line by line (repl is an alias)",
		help: `Sends each line you type to AGENT and prints the answers as they stream;
repl is another name for it. Ctrl+C while an answer streams cancels that run;
Ctrl+C or Ctrl+D at an empty prompt leaves. Lines that start with / are
commands: /session [NAME], /history, /help, /exit (//TEXT sends /TEXT).
A call that waits for approval is asked on the terminal: a allows it once,
r for the rest of the run, d denies it, s denies it and stops the run; a
question of the agent's ask_user tool reads your answer as a line (Ctrl+C
at either cancels the run). --approve TOOL allows the calls of TOOL once
without asking.
Without a terminal it reads lines from stdin, one send each; the exit status
is then 0 when every run was ok, 1 if one failed or was cancelled, 2 if a
request was refused or a command was bad, 130 after Ctrl+C (which cancels the
streaming run, then ends the chat).
`,
		examples: `ctx agent chat coder
ctx agent chat coder --approve fs.write
printf 'hello\n/session other\nhi again\n' | ctx agent chat coder`,
		run: chat.Run},
	{name: "history", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fShared,
			{name: "last", short: "n", value: true, usage: "print only the last `N` messages (0: none)"},
			fJSON.with("print messages.jsonl's lines as they are")},
		short: "Print the session's messages as a transcript",
		help:  "Prints the session's messages as a transcript (--json: messages.jsonl as is).\n",
		examples: `ctx agent history coder
ctx agent history coder --session review -n 2
ctx agent history coder --json | jq -r .role`,
		run: inspect.History},
	{name: "output", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fShared,
			fJSON.with(`print {"agent","session","text"}`)},
		short: "Print latest.md, the text of the latest assistant message",
		help:  "Prints latest.md, the text of the latest assistant message.\n",
		examples: `ctx agent output coder
ctx agent output coder --session review --json | jq -r .text`,
		run: inspect.Output},
	{name: "status", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fScope, fSpace, fShared, fJSON.with("print the server's status frame")},
		short: "Ask the server for the session's state and its runs",
		help:  "Asks the server for the session's state and its queued and running runs.\n",
		examples: `ctx agent status coder
ctx agent status coder --json | jq -r '.runs[].run'`,
		run: inspect.Status},
	{name: "compact", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fScope, fSpace, fShared, fJSON.with("print the server's compacted frame")},
		short: "Fold the session's older turns into its summary now",
		help:  inspect.CompactHelp,
		examples: `ctx agent compact coder
ctx agent compact coder --session review --json | jq .kept_turns`,
		run: inspect.Compact},
	{name: "cancel", posNames: "AGENT RUN-OR-CLIENT-ID", minArgs: 2, maxArgs: 2,
		flags: []flagDef{fShared, fScope, fSpace, fJSON.with("print the server's cancel frame")},
		short: "Cancel one run, named by its run id or by its client id",
		help:  "Cancels one run, named by its run id or by the client id of its send.\nA run of a shared space's session is found with --shared SPACE, of a temp\nsession with --scope temp.\nExit 0 when it was cancelled, 1 when it was not running (stale).\n",
		examples: `ctx agent cancel coder ctx-0123456789abcdef0123456789abcdef
ctx agent cancel coder job-1
ctx agent cancel coder --shared team ctx-0123456789abcdef0123456789abcdef`,
		run: send.Cancel},
	{name: "pending", posNames: "[AGENT]", maxArgs: 1,
		flags: []flagDef{fSession.with("list only the calls of the session `S`"), fShared, fJSON.with("print the server's pending frames")},
		short: "List the tool calls and questions that wait for your answer",
		help:  approval.PendingHelp,
		examples: `ctx agent pending
ctx agent pending coder --json | jq -r '.run + " " + .id'`,
		run: approval.Pending},
	{name: "approve", posNames: "AGENT RUN CALL", minArgs: 3, maxArgs: 3,
		flags: []flagDef{fShared, fScope, fSpace,
			{name: "deny", usage: "deny the call: the model is told, the run goes on"},
			{name: "run", usage: "allow it and later calls of the same tool in this run"},
			{name: "stop", usage: "deny it and stop the run (done cancelled)"},
			{name: "reason", value: true, usage: "the reason `TEXT`, recorded with the decision"},
			fJSON.with("print the recorded approval_result")},
		short: "Answer a tool call that waits for approval (allow once by default)",
		help:  approval.ApproveHelp,
		examples: `ctx agent approve coder ctx-0123456789abcdef0123456789abcdef call_1
ctx agent approve coder ctx-0123456789abcdef0123456789abcdef call_2 --deny --reason 'not that file'`,
		run: approval.Approve},
	{name: "answer", posNames: "AGENT RUN CALL TEXT...", minArgs: 4, maxArgs: -1,
		flags:    []flagDef{fShared, fScope, fSpace, fJSON.with("print the recorded answer")},
		short:    "Answer a question a run asked (its ask_user tool)",
		help:     approval.AnswerHelp,
		examples: `ctx agent answer coder ctx-0123456789abcdef0123456789abcdef call_3 use the main branch`,
		run:      approval.Answer},
	{name: "runs", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fShared,
			{name: "grep", value: true, usage: "keep the runs whose input or answer contains `WORD` (any case)"},
			{name: "interrupted", usage: "keep the runs that a stop of the server interrupted"},
			fJSON.with("print one object per run")},
		short: "List the session's runs: id, status, times and input",
		help:  inspect.RunsHelp,
		examples: `ctx agent runs coder
ctx agent runs coder --grep deploy
ctx agent runs coder --interrupted --json`,
		run: inspect.Runs},
	{name: "wait", posNames: "AGENT CHILD", minArgs: 2, maxArgs: 2,
		flags: []flagDef{fSession, fShared,
			{name: "block", usage: "wait until the child has finished"}},
		short: "Print a child run's status and result (exit 0 done, 1 error, 130 cancelled, 69 not finished)",
		help:  inspect.WaitHelp,
		examples: `ctx agent wait coder ctx-0123456789abcdef0123456789abcdef
ctx agent wait coder ctx-0123456789abcdef0123456789abcdef --session review --block`,
		run: inspect.Wait},
	{name: "versions", posNames: "AGENT [PATH]", minArgs: 1, maxArgs: 2,
		flags: []flagDef{fSession, fShared, fJSON.with("print versions/index.jsonl's lines as they are")},
		short: "List the session's file versions: what tools changed, and what was kept",
		help:  inspect.VersionsHelp,
		examples: `ctx agent versions coder
ctx agent versions coder --session review /work/main.go
ctx agent versions coder --json | jq -r 'select(.action=="modify").path'`,
		run: inspect.Versions},
	{name: "restore", posNames: "AGENT [PATH]", minArgs: 1, maxArgs: 2,
		flags: []flagDef{fSession, fShared,
			{name: "version", value: true, usage: "restore the file as version `N` kept it"},
			{name: "run", value: true, usage: "restore every file run `R` changed, as before it"},
			fJSON.with("print the raw reply frames as JSON lines")},
		flagHelp: "(--version N | --run R) [--session S] [--shared SPACE] [--json]",
		short:    "Put files back as they were before a tool changed them",
		help:     send.RestoreHelp,
		examples: `ctx agent restore coder --version 3
ctx agent restore coder --run ctx-0123456789abcdef0123456789abcdef /work/main.go`,
		run: send.Restore},
	{name: "search", posNames: "AGENT QUERY...", minArgs: 2, maxArgs: -1,
		flags: []flagDef{fSession.with("search only the session `S`"), fShared, fJSON.with("print the server's frames")},
		short: "Find text in the messages of AGENT's sessions",
		help:  inspect.SearchHelp,
		examples: `ctx agent search coder flaky test
ctx agent search coder --session review 部署`,
		run: inspect.Search},
	{name: "usage", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession.with("count only the session `S` (default: every session)"), fShared,
			{name: "since", value: true, usage: "count only the events of the last `DAYS` days (fractions allowed)"},
			fJSON.with("print one object")},
		short: "Print the token usage of AGENT's sessions, per model and per session",
		help:  inspect.UsageHelp,
		examples: `ctx agent usage coder
ctx agent usage coder --since 7 --json | jq .output_tokens`,
		run: inspect.Usage},
	{name: "trajectory", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fSession, fShared, fJSON.with("accepted for uniformity: the output is always JSON")},
		short: "Print the session as one ATIF v1.7 document",
		help:  "Prints the session as one ATIF v1.7 document (JSON), only when it validates.\nExit 1 when it is refused (EINVAL) or the session has no messages (ENODATA).\n",
		examples: `ctx agent trajectory coder > coder.atif.json
ctx agent trajectory coder --session review | jq '.steps | length'`,
		run: inspect.Trajectory},
	{name: "session list", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fShared, fJSON.with("print one object per session")},
		short: "List AGENT's sessions, most recently updated first",
		help:  "Prints the agent's sessions, most recently updated first (--json: one object\nper session: name, state, updated_at, created_at, meta.json's persona fields).\n",
		examples: `ctx agent session list coder
ctx agent session list coder --json | jq -r 'select(.state=="done").name'`,
		run: sessions.List},
	{name: "session archive", posNames: "AGENT SESSION", minArgs: 2, maxArgs: 2,
		flags: []flagDef{fShared, fArchDir, fJSON.with(`print {"session","action","done","error"}`)},
		short: "Move one session, whole, to archived_sessions/",
		help:  "Moves one session, whole, to archived_sessions/AGENT/ (or ABS/AGENT/).\nA protected session (index, default, current, active, unreadable state) is refused: EBUSY.\nAn existing target is EEXIST; a target on another filesystem EXDEV (nothing is copied).\n",
		examples: `ctx agent session archive coder e2e-42
ctx agent session archive coder old --archive-dir /srv/archive`,
		run: sessions.Archive},
	{name: "session gc", posNames: "AGENT", minArgs: 1, maxArgs: 1,
		flags: []flagDef{fShared,
			{name: "pattern", value: true, repeat: true, usage: "take the sessions whose names match `GLOB` (replaces the defaults)"},
			{name: "older-than-days", value: true, usage: "take only sessions whose newest file is older than `N` days"},
			{name: "keep", value: true, repeat: true, usage: "never take the session `NAME`"},
			{name: "yes", usage: "do it (without --yes: print what would be done, write nothing)"},
			{name: "delete", usage: "delete instead of archiving"},
			fArchDir, fJSON.with(`print one {"session","action","dry_run","done","error"} per session`)},
		short: "Archive or delete test sessions by name pattern (a dry run without --yes)",
		help:  "Archives (or with --delete deletes) the sessions whose names match a pattern\n(default: *smoke* e2e-* repro-* install-* deterministic-* ansi-* spark-* temp-*).\nWithout --yes it only prints what it would do, and writes nothing.\n",
		examples: `ctx agent session gc coder
ctx agent session gc coder --pattern 'tmp-*' --older-than-days 7 --keep tmp-keep --yes
ctx agent session gc coder --delete --yes`,
		run: sessions.GC},
	{name: "session delete-archived", posNames: "AGENT SESSION", minArgs: 2, maxArgs: 2,
		flags: []flagDef{
			{name: "yes", usage: "do it (without --yes: say whether there is one, write nothing)"},
			{name: "uid", value: true, usage: "root only: the archived session of uid `N`'s home (default: your own)"},
			fJSON.with(`print {"session","action","dry_run","done","error"}`)},
		short: "Delete one archived session, whole, giving its bytes back (a dry run without --yes)",
		help:  "Deletes archived_sessions/AGENT/SESSION of your home, whole, and gives its bytes\nof history back (CTXFS_LIMITS logbytes). Without --yes it only says whether there\nis one, and writes nothing. None of that name is ENOENT; another uid's, EACCES.\n",
		examples: `ctx agent session delete-archived coder e2e-42
ctx agent session delete-archived coder e2e-42 --yes
sudo ctx agent session delete-archived coder e2e-42 --uid 1001 --yes`,
		run: sessions.DeleteArchived},
	{name: "import", posNames: "AGENT [FILE|DIR]...", minArgs: 1, maxArgs: -1,
		flags: []flagDef{
			{name: "from", value: true, usage: "the CLI whose session files these are: `claude-code|codex`"},
			{name: "uid", value: true, usage: "root only: import into the home of uid `N` (default: your own), reading the files as N"}},
		short: "Make sessions of AGENT from Claude Code or Codex session files",
		help: `Makes one new session of AGENT per Claude Code project file (<uuid>.jsonl)
or Codex rollout (rollout-*.jsonl): its user and assistant messages, tool
calls and tool results in order, named by the CLI's session uuid, with
the index's by-uuid entry for it set; a copy of the file goes under the agent's HOME
(root/home/agent), so that a send with a cli agent resumes the CLI session.
A DIR is walked for the CLI's files; without FILE or DIR, your
~/.claude/projects or ~/.codex/sessions. Each session is written whole or
not at all: a uuid already imported is EEXIST, a malformed file EINVAL
naming its line, a file you cannot read EACCES. One line per file imported
on stdout, one per refusal on stderr. Exit status: 0 all imported, 1 a file
was refused, 2 bad usage or no server.
`,
		examples: `ctx agent import coder --from claude-code
ctx agent import coder --from codex ~/.codex/sessions/2026/12
sudo ctx agent import coder --from claude-code --uid 1001 /home/ann/.claude/projects`,
		run: cliimport.Import},
	{name: "attach", aliases: []string{"resume"}, posNames: "AGENT [RUN]", minArgs: 1, maxArgs: 2,
		flags: []flagDef{fSession, fScope, fSpace, fShared,
			fJSON.with("print the raw frames, one JSON object a line, as `send --json` does")},
		short: "Follow a run again (after Ctrl+C detached a send) and stream the rest",
		help:  send.AttachHelp,
		examples: `ctx agent attach coder
ctx agent attach coder --session s1 ctx-0123456789abcdef0123456789abcdef
ctx agent resume coder --json`,
		run: send.Attach},
	{name: "list", maxArgs: 0,
		flags: []flagDef{fJSON.with("print one object per definition")},
		short: "List the agents and models, their definitions' state and sockets",
		help:  doctor.AgentListHelp,
		examples: `ctx agent list
ctx agent list --json | jq -r 'select(.state != "ok") | .name'`,
		run: doctor.AgentList},
	{name: "add", posNames: "NAME", minArgs: 1, maxArgs: 1,
		flags: []flagDef{
			{name: "cli", value: true, usage: "`CLI` to run: claude-code, codex, gemini or opencode"},
			{name: "path", value: true, usage: "the CLI's executable `BIN`, an absolute path (default: its program in PATH)"},
			{name: "endpoint", value: true, usage: "the API base `URL` the CLI sends to"},
			{name: "model", value: true, usage: "the model `M` the CLI is told to use (model_id)"},
			{name: "api-key-env", value: true, usage: "the server's environment variable `VAR` that holds the key"},
			{name: "api-key-file", value: true, usage: "the root-owned file `PATH` that holds the key"},
			{name: "isolation", value: true, usage: "`MODE`: none (default) or chroot"},
			{name: "force", usage: "replace an existing agent NAME"}},
		short: "Define an agent that runs a coding-agent CLI (as root)",
		help:  agentadd.Help,
		examples: `ctx agent add claude --cli claude-code --api-key-env ANTHROPIC_API_KEY
ctx agent add codex --cli codex --path /opt/codex/bin/codex --endpoint https://api.openai.com/v1 --model gpt-5.1-codex --api-key-file /etc/ctxfs/openai.key`,
		run: agentadd.Add},
	{name: "doctor", top: true, maxArgs: 0,
		flags: []flagDef{fJSON.with("print one object per check")},
		short: "Check the mount, the sockets, the definitions, FUSE and the store; name each fix",
		help:  doctor.Help,
		examples: `ctx doctor
ctx doctor --json | jq -r 'select(.ok | not) | .fix'`,
		run: doctor.Run},
	{name: "version", top: true, maxArgs: 0,
		flags:    []flagDef{fJSON.with(`print {"version","go","revision","time","modified"}`)},
		short:    "Print the version of ctx",
		help:     "Prints the version of this ctx, from its build information.\n",
		examples: "ctx version",
		run:      runVersion},
}

// path is the command's words after "ctx": "agent send", "version".
func (c *command) path() string {
	if c.top {
		return c.name
	}
	return "agent " + c.name
}

// leaf is the last word of the name, the cobra command's own name.
func (c *command) leaf() string {
	words := strings.Fields(c.name)
	return words[len(words)-1]
}

// flagSynopsis is flagHelp, or the flags in table order.
func (c *command) flagSynopsis() string {
	if c.flagHelp != "" {
		return c.flagHelp
	}
	s := make([]string, len(c.flags))
	for i, f := range c.flags {
		s[i] = f.synopsis()
	}
	return strings.Join(s, " ")
}

func (c *command) synopsis() string {
	s := "ctx " + c.path()
	for _, part := range []string{c.posNames, c.flagSynopsis()} {
		if part != "" {
			s += " " + part
		}
	}
	return s
}

// shortHelp is short, else help's first sentence (or line).
func (c *command) shortHelp() string {
	if c.short != "" {
		return c.short
	}
	s, _, _ := strings.Cut(c.help, "\n")
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, ".")
}

// takesInput reports whether the command's last positional is free text
// (INPUT..., QUERY...): only then can a word that starts with - be meant
// as text, and only then does an unknown flag get the hint about --.
func (c *command) takesInput() bool {
	return c.maxArgs < 0
}
