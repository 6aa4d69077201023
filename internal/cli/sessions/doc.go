// Package sessions holds the commands over an agent's sessions as a whole:
// `ctx agent session list`, `archive` and `gc`. List reads index/list and
// each session's files through the mount. An archive is one rename
// (RENAME_NOREPLACE) through the mount by the caller's own authority, which
// the server carries out or refuses (EBUSY for a protected session); a
// delete, the question why a session is busy, and gc's question which of
// its candidates the server would take (op archivable, one request for
// all of them, its answer streamed), go to the agent's socket.
//
// It never touches the store and never copies a session: a target on
// another filesystem is refused (EXDEV) before anything is made there.
package sessions
