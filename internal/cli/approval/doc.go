// Package approval holds the commands that answer the calls of runs that
// wait for a person (SPEC 17): `ctx agent pending`, `ctx agent approve`,
// `ctx agent answer`; the answering of --approve TOOL on send and chat
// (Auto); and the command line a printer shows beside a request nobody
// here answers (Command).
//
// It never touches the store: it sends the ops approve, answer and
// pending to agents' sockets and reads only the names of the definitions
// under the mount. It must not import package send or chat, which use it.
package approval
