// Package freetree owns the free trees (an agent's root/, a session's
// context/, a shared space's contexts) as the FUSE projection serves
// them: the door to the store that checks, on every call, that its path
// is inside a free tree (ENOENT otherwise, never a guess); the identity a
// caller acts with there (Cred: the group rule of shared spaces, and
// GiveToCaller for what root makes); and the quota accounting of every
// change a user makes there (each create, write, truncate, allocation,
// removal and rename is charged to or given back from its owner's bytes
// and inodes, quota.FreeQuota: EDQUOT before anything is made), and the
// walk that counts what a uid keeps there (Tree.Count), for the quota.
//
// It must never reach outside a free tree (no log, seal, ABI file or
// index), never follow a symlink (every store call goes through
// internal/storefs), never decide which names the ABI allows (the
// engine's rules, package session and layout), and never import the
// engine, fs, server or cmd: the engine hands a Tree to the projection
// (session.Engine.FreeTree), which only turns system calls into its calls.
package freetree
