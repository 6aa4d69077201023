// Package clienv is what every ctx command shares, and nothing else: the
// environment a command runs in (Env: its stdin, stdout, stderr,
// environment and uid, so that tests run whole commands in-process), its
// parsed line (Parsed), the exit statuses, the place a command names
// (Where: the agent's session container, the scope and the session),
// how a failure is worded (Fail, Describe, the not-found messages, which
// never show a path inside the mount), the one-request call and the
// exchange with an agent's socket, the progress line, and the text helpers
// for terminals. It is one package so that each command package depends on
// it alone and words its errors and exit statuses the same way.
//
// It owns no command and never imports another package of internal/cli.
// It never touches the store: it reads the mount and dials the agent
// sockets under it, as any user could, and writes only to the command's
// stdout and stderr.
package clienv
