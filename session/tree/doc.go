// Package tree owns what the FUSE projection asks about the tree's names
// that needs no session loaded: what a path is (Lookup: its place, the
// store file's attributes, what the engine promises about a directory's
// listing), what a directory lists, the virtual files of a container's
// index (list, current, by-cwd, by-hash, by-uuid), which opens, creates,
// links, removals and attribute changes each place takes, and how an
// attribute change is applied to a store file (SetAttr.Apply).
//
// The engine embeds Tree, so these are the engine's calls (package fs
// asks them of session.Engine). Tree reaches the store only through the
// engine's door (storefs) and the engine's calls in Engine. It must never
// write a session's files, load a session or decide a session's rules
// (sends, values, meta.json, archives are the engine's), and never import
// the engine, fs, server or cmd.
package tree

import (
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Engine is what Tree asks of the engine: a uid's home made on its first
// lookup, a container's index (loaded once, by the engine), and the
// attributes of a store file as the mount shows them, a derived value not
// yet written included.
type Engine interface {
	EnsureHome(uid uint32) error
	Index(ct layout.Container) (*index.Index, error)
	Stat(rel string) (*unix.Stat_t, error)
}

// Tree answers the projection's questions about the tree of one store.
type Tree struct {
	root *storefs.Root // the store, its errors naming paths under the mount
	e    Engine
}

// New is the tree of the store root, asking e what only the engine knows.
func New(root *storefs.Root, e Engine) Tree { return Tree{root: root, e: e} }
