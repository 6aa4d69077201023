// Package send holds the commands that start, follow and stop runs:
// `ctx agent send`, `ctx agent attach` (resume) and `ctx agent cancel`, and
// the printer that turns a run's reply frames into what a person reads
// (or passes them through with --json) and into the exit status. Chat's
// send path uses the same request and printer, so that a line sent from
// the chat reads and ends as a send does.
//
// It never touches the store: it talks to the server through the agent's
// socket and reads a session's recorded text through the mount only (for
// a replayed run), and it never writes under the mount.
package send
