// Package chat is `ctx agent chat` (repl): the interactive terminal (raw
// mode, line editing, Ctrl+C that cancels the streaming run, window size,
// the terminal restored on every way out) and, without a terminal, the
// line-by-line loop over stdin, with its / commands. Each line is sent
// with package send's request and printer.
//
// It never touches the store: it talks to the server through the agent's
// socket and reads the session's messages through the mount only.
package chat
