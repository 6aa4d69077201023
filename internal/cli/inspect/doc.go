// Package inspect holds the commands that read a session and change
// nothing: `ctx agent history`, `output`, `status`, `runs`, `usage`,
// `search` and `trajectory`. They read the session's files through the
// mount or ask the agent's socket (status, search, the run phases of
// runs), and print.
//
// They never write under the mount and never touch the store; trajectory
// hands the session's logs, open, to ctx-trajectory (trajexport), which
// builds its document in an unlinked temporary file outside the mount.
package inspect
