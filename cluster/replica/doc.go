// Package replica is a follower's view of a store another server writes:
// with one writer host per store (cluster/), every other host serves the
// whole tree to its local users read-only, reading the shared store. A
// Replica answers every call the FUSE projection makes (fs.Engine) from
// the store files as they are.
//
// What it owns: the answers a follower gives. The tree's names, listings,
// attributes and who may open what are package tree's rules, the same
// calls the writer's engine makes (so who sees what is the writer's
// mount's, to the errno), with one difference: a follower promises no
// announcement before a change (tree.Promises are zero), since it hears
// of changes only by looking. Single values are read from the store files
// (layout.ReadValue), the index through index.View; a session log is
// verified at open against its seal and the writer's journal
// (verify.go), and what a process holds open is watched for changes made
// by the writer (watch.go), which OnChange hands to the projection.
//
// Every change outside the free trees (a request written to a ctl file,
// lines appended to a session log, a value written, a directory made, an
// index value written or removed, attributes changed, a rename) it
// passes on: to the writer host, through the relay its host sets
// (SetRelay, relay.go), which checks and makes it there; without one
// every change is EROFS. A change in a free tree is EROFS always.
//
// What it must never do: write to the store, in any way. Its storefs.Root
// is read-only (storefs.ReadOnly: every change is EROFS before any system
// call), and every change asked of it is refused with EROFS before that:
// no temp cleaned, no index leftover cleared, no derived value written, no
// interrupted run closed, no journal replayed. Those are the writer's.
package replica
