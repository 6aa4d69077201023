package fs

import (
	"os"
	"path"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

// The errno of every shape of mkdir the mount may send (Engine.MkdirAt),
// in order on one store, so that an entry made by one step is there for
// the next: which check comes first is part of the answer (a bad name is
// EINVAL before the caller's access is asked; another uid's home is
// EACCES before the shape below it is judged). Pinned from the engine as
// it was when Mkdir parsed paths by hand, before it read layout.Classify.
func TestMkdirErrnoOrder(t *testing.T) {
	v := newHandleEnv(t)
	v.session(user) // home/1001/agent/coder/session/s1
	const other = 1002
	root := layout.Caller{Pid: os.Getpid()}
	as := func(uid uint32) layout.Caller { return layout.Caller{Uid: uid, Gid: uid, Pid: os.Getpid()} }
	home := "home/1001"
	coder := home + "/agent/coder"
	for _, c := range []struct {
		who  layout.Caller
		rel  string
		want syscall.Errno
	}{
		{root, "home", syscall.EPERM},
		{root, "elsewhere/x", syscall.EPERM},
		{as(user), "shared/team", syscall.EPERM},
		{as(user), "shared/bad name", syscall.EINVAL},
		{root, "shared/.team", syscall.EPERM},
		{root, "shared/team", 0},
		{as(user), "shared/nosuch/agent", syscall.ENOENT},
		{as(other), "shared/team/agent", syscall.EACCES},
		{root, "shared/team/agent", 0},
		{root, "shared/team/agent/coder/root", syscall.EPERM},
		{as(user), "home/1002", syscall.EACCES},
		{as(user), home, syscall.EEXIST},
		{as(user), "home/abc", syscall.EPERM},
		{as(user), "home/01001", syscall.EPERM},
		{root, "home/1003", 0},
		{as(other), home + "/agent", syscall.EACCES},
		{as(user), home + "/agent", syscall.EEXIST},
		{as(user), home + "/history", syscall.EPERM},
		{as(other), home + "/agent/bad name", syscall.EINVAL},
		{as(user), home + "/agent/.x", syscall.EPERM},
		{as(other), home + "/agent/x", syscall.EACCES},
		{as(user), home + "/agent/x", 0},
		{as(user), home + "/agent/x", syscall.EEXIST},
		{as(user), home + "/model", 0},
		{as(user), home + "/model/bad name", syscall.EINVAL},
		{as(user), home + "/model/nosuch", syscall.ENOENT}, // no provider the root defines
		{as(user), home + "/model/debug", 0},
		{as(user), home + "/model/debug/m", syscall.EPERM},
		{as(other), home + "/model/debug/bad name.d", syscall.EINVAL},
		{as(other), home + "/model/debug/m.d", syscall.EACCES},
		{as(user), home + "/model/debug/m.d", 0},
		{as(user), home + "/model/debug/m.d/session", syscall.EPERM},
		{as(other), home + "/model/debug/m.d/session", syscall.EACCES},
		{as(other), coder + "/session", syscall.EACCES},
		{as(user), coder + "/session", syscall.EPERM},
		{as(other), coder + "/session/index", syscall.EACCES},
		{as(user), coder + "/session/index", syscall.EPERM},
		{as(user), coder + "/session/index/by-hash", syscall.EPERM},
		{as(user), coder + "/session/index/other", syscall.EPERM},
		{as(other), coder + "/root", syscall.EACCES},
		{as(user), coder + "/root", syscall.EPERM},
		{as(user), coder + "/session/s1/context", syscall.EPERM},
		{as(user), coder + "/session/s1/notes", syscall.EPERM},
		{as(user), coder + "/session/s1/state", syscall.EPERM},
		{as(other), coder + "/session/bad name", syscall.EINVAL},
		{as(other), coder + "/session/s2", syscall.EACCES},
		{as(user), coder + "/session/s1", syscall.EEXIST},
		{as(user), coder + "/session/s2", 0},
		{as(other), home + "/archived_sessions", syscall.EACCES},
		{as(user), "home/abc/archived_sessions", syscall.EINVAL},
		{root, "home/abc/archived_sessions/coder", syscall.EINVAL},
		{as(user), home + "/archived_sessions/coder", 0}, // and the archive with it
		{as(user), home + "/archived_sessions", syscall.EEXIST},
		{as(other), home + "/archived_sessions/.x", syscall.EACCES},
		{as(user), home + "/archived_sessions/.x", syscall.EINVAL},
		{as(user), home + "/archived_sessions/bad name", syscall.EINVAL},
		{as(user), home + "/archived_sessions/coder", syscall.EEXIST},
		{as(user), home + "/archived_sessions/coder/s1", syscall.EPERM},
		{as(user), home + "/archived_sessions/coder/s1/x", syscall.EPERM},
	} {
		err := v.e.MkdirAt(c.who, c.rel)
		if got := abi.Errno(err); got != c.want {
			t.Errorf("mkdir %s as uid %d: %v (%s), want %s", c.rel, c.who.Uid, err, abi.ErrnoName(got), abi.ErrnoName(c.want))
		}
	}
}

// What the engine promises of each directory's listing (session.Promises),
// which fs turns into the kernel's caches: kept for the sessions'
// directories and the index's, from memory for the index's; nothing for
// the rest, whose names may change behind the kernel's back or are
// structural.
func TestListingPromises(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	sessions := path.Dir(sess)
	testkit.Must(t, v.e.MkdirAt(layout.Caller{Uid: user, Gid: user}, "home/1001/archived_sessions/coder"))
	for _, c := range []struct {
		rel               string
		cache, fromMemory bool
	}{
		{"home", false, false},
		{"home/1001", false, false},
		{"home/1001/agent", false, false},
		{"home/1001/agent/coder", false, false},
		{"home/1001/agent/coder/root", false, false},
		{"home/1001/archived_sessions/coder", false, false},
		{sessions, true, false},
		{sess, true, false},
		{sessions + "/index", true, true},
		{sessions + "/index/by-hash", true, true},
		{sess + "/context", false, false},
		{sess + "/state", false, false},
	} {
		n, err := v.e.Lookup(user, c.rel)
		if err != nil {
			t.Errorf("lookup %s: %v", c.rel, err)
			continue
		}
		if n.CacheListing != c.cache || n.ListedFromMemory != c.fromMemory {
			t.Errorf("%s: CacheListing %v, ListedFromMemory %v; want %v, %v", c.rel, n.CacheListing, n.ListedFromMemory, c.cache, c.fromMemory)
		}
	}
}
