// Package fsck re-verifies a store from scratch (SPEC section 6), as
// `ctxfs fsck` runs it: the store's shape (what may be where, with which
// owner and mode: shape.go), the write-ahead journal, each session's
// logs against their seals line by line, its identity, and its
// single-value files.
//
// It stands on the tree grammar (session/layout) and the sealed log
// (session/sealedlog) alone, with no engine: it works on the store root,
// served or not. It must never change the store unless asked to repair
// (and then only what a server's start would do, reporting each change),
// never import the engine, fs, server or cmd, and never decide for a
// running server.
package fsck
