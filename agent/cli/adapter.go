package cli

import (
	"regexp"
	"sort"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// The CLIs, by the names agent/NAME.d/cli gives them.
const (
	ClaudeCode = "claude-code"
	Codex      = "codex"
	Gemini     = "gemini"
	OpenCode   = "opencode"
)

// Options are what one run asks of a CLI.
type Options struct {
	// Resume is the CLI's own session id to go on with ("" starts a new
	// session). It must be ValidSessionID: it goes on the command line.
	Resume string
	// Model is the model the CLI is told to use; "" leaves its default.
	Model string
	// BaseURL is the API endpoint the CLI must send to (a gateway, a
	// simulator); "" leaves the CLI's own. For the CLIs that take it only
	// from a config file (Codex, opencode), the Invocation carries that file.
	BaseURL string
}

// Invocation is how to run a CLI once. The prompt goes on the CLI's
// stdin, then EOF: never in argv, where a prompt that starts with "-"
// would be read as a flag.
type Invocation struct {
	Args []string // after the executable
	// Env are NAME=value lines the CLI needs besides the clean
	// environment and HOME; never a key.
	Env []string
	// KeyVar is the variable the CLI reads its API key from: the engine
	// hands the agent's key (api_key_env, api_key_file) in it.
	KeyVar string
	// Files are written under the CLI's HOME before it starts (its
	// configuration), paths relative to HOME; they hold no key.
	Files []File
}

// File is one file an Invocation needs under HOME.
type File struct {
	Path string
	Data []byte
}

// Adapter is what ctxfs knows of one CLI.
type Adapter interface {
	// Name is the CLI's name in agent/NAME.d/cli.
	Name() string
	// Program is the executable the CLI's npm package installs (what
	// agent/NAME runs, or a script execs); `Program --version` prints
	// Version.
	Program() string
	// Version is the CLI version the mapping was written against and
	// tested with (testdata/npm/package.json pins it).
	Version() string
	// Invocation is the run's command line, environment and files;
	// EINVAL when o.Resume is not a session id or o.BaseURL holds
	// characters a config file cannot carry.
	Invocation(o Options) (Invocation, error)
	// NewParser returns the parser of one run's stdout.
	NewParser() Parser
}

// Parser maps one run's stdout, line by line, to frames. It keeps state
// across the lines of its run (an assistant message is built from several
// events) and is used by one goroutine.
type Parser interface {
	// Parse maps one stdout line (without its newline) to the frames it
	// makes, in order; it never fails: what it cannot map is a log frame.
	Parse(line []byte) []*proto.Object
	// SessionID is the CLI's own session id once the stream has named
	// one, or "".
	SessionID() string
	// Finish is called once at the CLI's exit, with its exit status and
	// the end of its stderr (what the CLI says when it fails before its
	// stream starts: an unknown session to resume, a bad flag). It returns
	// the last frames (the assistant text still held, an error frame when
	// the CLI failed without saying why in its stream) and the run's
	// status for the done frame the engine writes: "ok" or "error".
	Finish(exit int, stderrTail []byte) (frames []*proto.Object, status string)
}

var adapters = map[string]Adapter{
	ClaudeCode: claudeCode{},
	Codex:      codex{},
	Gemini:     gemini{},
	OpenCode:   openCode{},
}

// Lookup returns the adapter of a CLI name; ENOENT for a name it does not
// know.
func Lookup(name string) (Adapter, error) {
	if a, ok := adapters[name]; ok {
		return a, nil
	}
	return nil, abi.Errorf(syscall.ENOENT, "cli", "unknown CLI %q (known: %v)", name, Names())
}

// Names are the CLI names, sorted.
func Names() []string {
	names := make([]string, 0, len(adapters))
	for n := range adapters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lazyRegexp compiles pattern at its first use, not at the start of
// every program that links this package (ctx does: a start of it compiled
// them all, about 0.3 ms; docs/benchmarks.md, "ctx's start").
func lazyRegexp(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// sessionIDShape is what a CLI session id may look like: the CLIs use
// UUIDs (Claude Code, Codex, Gemini CLI) and "ses_" plus base62
// (opencode). Nothing that could be a flag, a path or a second argument.
var sessionIDShape = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ValidSessionID says whether id may be a CLI's session id: taken from a
// stream only then, given back on a command line only then.
func ValidSessionID(id string) bool { return sessionIDShape().MatchString(id) }

// checkResume refuses a resume id of another shape.
func checkResume(cli, id string) error {
	if id != "" && !ValidSessionID(id) {
		return abi.Errorf(syscall.EINVAL, cli, "%q is not a session id", truncate(id, 64))
	}
	return nil
}
