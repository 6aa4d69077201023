// Package doctor holds the commands that look at the installation rather
// than at sessions: `ctx doctor` (the mount, the agent and model
// definitions and their sockets, /dev/fuse, fuse.conf, the store's path
// and its owners, each coding-agent CLI agent's executable and version,
// each problem with its fix) and `ctx agent list` (the
// definitions' state and sockets), which share the reading of the
// definitions under the root.
//
// It only looks: it writes nothing, sends an agent no request but a ping
// (op ping, which starts no run), and of the store it only stats the path
// and its parents. The one program it runs is a CLI agent's executable with
// --version, as the caller (never as another user), in a temporary HOME it
// removes, bounded by a timeout.
package doctor
