// Package fs is the FUSE projection of the session store: it mounts
// <root>/home and <root>/shared and serves the tree of SPEC section 2 with
// the file behaviour of sections 5, 6, 7 and 9.
//
// fs never decides a rule: which names may exist, what a valid line, value
// or request is and who may do what is the engine's (the calls of Engine,
// engine.go, which session.Engine answers: Lookup, ReadDir, CheckOpen,
// CheckValue, Setattr, MkdirAt, Unlink, Rmdir, Rename, …) or the kernel's
// (default_permissions over the store's real owners and modes). fs never
// touches the store itself: it asks the engine, and the free trees go
// through the engine's door for them (freetree.Tree), which checks every
// path is in a free tree, owns the group rule of shared spaces, charges
// each change to its owner's quota and never follows a symlink (fs
// imports no store package). fs only turns
// system calls into engine calls, buffers what arrives in pieces (partial
// log lines, single values, a control request), and keeps the kernel's
// caches honest: the kernel keeps names, attributes, listings and small
// files' pages for long (node.go), and every change is invalidated before
// it is acknowledged (notify.go), on the inode the kernel holds, whichever
// node object gave it what it holds (identity.go). A node of a session
// stands for that session's life at its path alone (life.go): held across
// an archive or a delete, it never reaches a session made anew there.
//
// There is one node type per kind of file: dirNode (directories of the
// ABI), logNode (messages.jsonl, events.jsonl), valueNode (state, cwd,
// meta.json), indexValueNode (index/current and index entries), roNode
// (read-only files), listNode (index/list), ctlNode (ctl); the free trees
// (an agent's root/, a session's context/) are freeNodes, a loopback of
// the store made symlink-safe.
package fs
