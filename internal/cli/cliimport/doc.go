// Package cliimport is `ctx agent import AGENT --from claude-code|codex
// [FILE|DIR]...` (SPEC 16): it reads the coding-agent CLIs' session files
// the caller can read (agent/cli.ReadSession), sends each one's messages
// to the agent's socket (the import op, package session/importer), which
// makes one new session per file, and puts a copy of the CLI's own file
// under the agent's HOME (root/home/agent, through the mount, by the
// caller's own authority), where the CLI finds it when the next send
// resumes the session.
//
// It runs as the user and opens files with the user's rights only: a
// file the user cannot read is EACCES, and nothing of it is sent; root
// importing for uid N (--uid) walks, reads and copies with N's rights. It
// never touches the store: the server judges everything it sends again.
package cliimport
