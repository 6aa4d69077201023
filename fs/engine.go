package fs

import (
	"context"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Engine is every engine call fs makes, and nothing more: what fs may ask
// is written here, and a test can serve fs from anything that answers
// these (*session.Engine does; cmd/ctxfs checks that at compile time).
// Each rule is the engine's: fs turns a system call into one of these and
// the answer into a reply.
type Engine interface {
	// The tree: names, listings, attributes.
	Lookup(uid uint32, rel string) (session.Node, error)
	ReadDir(rel string) ([]session.DirEntry, error)
	Stat(rel string) (*unix.Stat_t, error)
	Statfs() (*unix.Statfs_t, error)
	Gone(rel string) bool
	OnChange(fn func(rel string, how session.Change))

	// Changes to the tree's names and attributes.
	CheckCreate(rel string) (layout.Place, error)
	MakeNode(rel string) error
	MkdirAt(c layout.Caller, rel string) error
	Unlink(c layout.Caller, rel string) error
	Rmdir(c layout.Caller, rel string) error
	Rename(c layout.Caller, oldRel, newRel string, flags uint32) error
	Setattr(c layout.Caller, rel string, a session.SetAttr) error

	// Files: opens, logs, single values, the index, reads.
	CheckOpen(pl layout.Place, flags int) error
	OpenRead(c layout.Caller, rel string) (*os.File, error) // c: who opens (a follower's verification takes turns by uid)
	ReadFile(rel string, limit int64) ([]byte, error)
	AppendLog(c layout.Caller, r layout.Ref, file string, lines []byte) error
	SyncLog(r layout.Ref, file string) error
	RecordLoss(c layout.Caller, r layout.Ref, file string, n int, lost session.Lost)
	Value(rel string) (session.Value, error)
	CheckValue(pl layout.Place, data []byte) error
	WriteFile(c layout.Caller, r layout.Ref, file string, data []byte) error
	IndexValue(pl layout.Place) (string, error)
	IndexList(ct layout.Container) ([]byte, error)
	WriteIndex(c layout.Caller, pl layout.Place, data []byte) error

	// The ctl file: a request begun; a refusal recorded, with its error
	// frame (Refuse) or without one (LogRefused).
	BeginControl(ctx context.Context, c layout.Caller, r layout.Ref, req *proto.Request) (*session.Reply, error)
	Refuse(c layout.Caller, t session.Target, req *proto.Request, err error) *proto.Object
	LogRefused(c layout.Caller, t session.Target, op string, err error)

	// Bounds per uid, and the free trees' door to the store (which checks
	// each path is in a free tree, owns the group rule and charges each
	// change to its owner's quota).
	Limits() *quota.Limits
	FreeTree() freetree.Tree
}
