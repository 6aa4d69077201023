// Package cli turns the coding-agent CLIs people already run (Claude Code,
// Codex, Gemini CLI, opencode: SPEC section 16) into ctxfs frames: for each
// CLI, the non-interactive invocation that makes it print a
// machine-readable event stream, the mapping of that stream to frames
// (delta, message, tool_call, tool_result, usage, error, log), how its own
// session id is read from the stream and given back to resume it, and
// readers of the session files two of them keep on disk (Claude Code's
// project jsonl, Codex's rollout jsonl) for import.
//
// It owns only that translation, one small Adapter per CLI, each naming
// the CLI version its mapping was written against (docs/clis.md has the
// runs it was written from; testdata/streams holds them). It must never
// run a program, read or write the store, or touch a file: the engine runs
// the CLI (as the session's uid, in its isolation), writes the files an
// Invocation lists, feeds the stdout lines to a Parser and records the
// frames. It never receives an API key: an Invocation names the variable
// the key goes in (KeyVar), and nothing it returns holds a key; a CLI that
// echoes one in its stream is the engine's to redact, like any program's
// output.
//
// The stream comes from a program that may be hostile, or merely newer
// than the mapping: a Parser never panics and never fails the run on what
// it reads. A line that is not a JSON object, or an event kind it does not
// know, becomes a log frame (kind and the event as it came, bounded); a
// line over MaxLineBytes is dropped with a log frame that says so; text,
// tool arguments and tool results are cut to fixed bounds (marked
// "truncated"), and every frame fits in one log line (abi.MaxLineBytes).
// Session ids taken from a stream are used again on a command line, so
// only ids of ValidSessionID's shape are kept.
package cli
