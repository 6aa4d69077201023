package storefs

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cred is a user's filesystem identity: the uid and gid that what it
// makes belongs to and that the kernel checks its access with, and the
// supplementary groups it may give a file to (chgrp; none unless set).
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32
}

// UserCred is uid's identity from the user database: its primary group
// and its supplementary groups; for a uid the database does not know, uid
// as its own group and no others.
func UserCred(uid uint32) Cred {
	c := Cred{Uid: uid, Gid: uid}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return c
	}
	c.Gid = parseID(u.Gid, uid)
	ids, _ := u.GroupIds()
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	return c
}

// PrimaryGid is uid's primary group from the user database, or uid itself
// for a uid the database does not know.
func PrimaryGid(uid uint32) uint32 {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return uid
	}
	return parseID(u.Gid, uid)
}

// parseID is the decimal id s, or or when s is none.
func parseID(s string, or uint32) uint32 {
	if g, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(g)
	}
	return or
}

// As returns a Root on the same descriptor whose operations on the free
// trees' last names (create, mkdir, open for writing, chmod, rename,
// unlink, …) run with c's filesystem identity and no capability, as the
// user would run them: what they make is the user's without a chown, and
// the store's filesystem applies its own rules for users to them (ext4
// keeps its reserved blocks for root, s_resuid and CAP_SYS_RESOURCE in
// ext4_has_free_clusters). The walk to the parent stays the server's: the
// directories above a free tree are closed to users. Root's Cred is the
// server itself (no change).
func (r *Root) As(c Cred) *Root {
	cp := *r
	if c.Uid != 0 {
		cp.as = &c
	} else {
		cp.as = nil
	}
	return &cp
}

// do runs call, the last syscall of an operation, with the Root's
// identity (as the server when it has none).
func (r *Root) do(call func() error) error {
	if r.as == nil {
		return call()
	}
	return AsUser(*r.as, call)
}

// AsUser runs call on a locked OS thread whose filesystem uid, gid and
// supplementary groups are c's and whose effective
// capabilities are none (setfsuid alone keeps CAP_SYS_RESOURCE, with which
// ext4 would let the write use root's reserved blocks), then gives the
// thread back exactly as it was. These are per-thread system calls (not
// Go's process-wide syscall.Setuid): no other goroutine runs with c's
// identity, and a thread whose identity could not be restored is never
// given back to the scheduler (the goroutine panics while still locked to
// it, and Go then ends the thread).
func AsUser(c Cred, call func() error) error {
	if c.Uid == 0 {
		return call() // root is the server itself
	}
	runtime.LockOSThread()
	saved, err := dropTo(c)
	if err != nil {
		restore(saved) // what was changed before the failure
		runtime.UnlockOSThread()
		return err
	}
	defer func() {
		restore(saved)
		runtime.UnlockOSThread()
	}()
	return call()
}

// threadCred is what switchThread changed on the thread, to put back.
type threadCred struct {
	caps    [2]unix.CapUserData
	haveCap bool
	groups  []uint32
	groupOK bool
	fsuid   int // the ids to set back; -1: unchanged
	fsgid   int
}

var capHeader = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}

// dropTo makes the current (locked) thread act as c: c's groups and
// filesystem ids, and no effective capability.
func dropTo(c Cred) (*threadCred, error) {
	return switchThread(threadSwitch{
		groups: c.Groups, setGroups: true,
		gid: int64(c.Gid), uid: int64(c.Uid),
	})
}

// threadSwitch is what switchThread makes of the current thread.
type threadSwitch struct {
	groups    []uint32 // the supplementary groups, when setGroups
	setGroups bool     // false: the groups are left as they are
	// gid and uid are the filesystem ids; -1: left as it is. They are
	// int64 so that no uint32 id of a Cred can turn into that -1.
	gid, uid int64
	// keepCaps raises the thread's effective capabilities again after
	// setfsuid (which clears the file ones); false drops them all.
	keepCaps bool
}

// switchThread changes the current (locked) thread as to says, step by
// step in this order: capabilities read, groups, fsgid, fsuid,
// capabilities set. What it changed, also when a step fails, is returned
// for restore, which undoes it last first.
func switchThread(to threadSwitch) (*threadCred, error) {
	s := &threadCred{fsuid: -1, fsgid: -1}
	h := capHeader
	if err := unix.Capget(&h, &s.caps[0]); err != nil {
		return s, fmt.Errorf("capget: %w", err)
	}
	s.haveCap = true
	if to.setGroups {
		if err := s.switchGroups(to.groups); err != nil {
			return s, err
		}
	}
	if err := switchFsid(unix.SYS_SETFSGID, to.gid, &s.fsgid); err != nil {
		return s, err
	}
	if err := switchFsid(unix.SYS_SETFSUID, to.uid, &s.fsuid); err != nil {
		return s, err
	}
	return s, s.setCaps(to.keepCaps, to.uid >= 0)
}

// switchGroups sets the thread's supplementary groups to groups, keeping
// the ones it replaces for restore.
func (s *threadCred) switchGroups(groups []uint32) error {
	was, err := threadGroups()
	if err != nil {
		return err
	}
	if slices.Equal(was, groups) { // a server started by systemd has none: nothing to change
		return nil
	}
	if err := setThreadGroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	s.groups, s.groupOK = was, true
	return nil
}

// switchFsid sets the thread's fsuid or fsgid (trap) to id, first keeping
// the one it replaces in *was for restore; an id of -1 changes nothing.
func switchFsid(trap uintptr, id int64, was *int) error {
	if id < 0 {
		return nil
	}
	*was = fsid(trap)
	return setFsid(trap, int(id))
}

// setCaps sets the thread's effective capabilities once its ids are
// switched. With keep they are the thread's own again: setfsuid cleared
// the file ones (with no fsuid set, uidSet false, none were cleared and
// nothing is done). Without, none: setfsuid alone keeps CAP_SYS_RESOURCE;
// the permitted ones stay, for restore to raise them again.
func (s *threadCred) setCaps(keep, uidSet bool) error {
	caps := s.caps
	if !keep {
		caps = [2]unix.CapUserData{
			{Permitted: s.caps[0].Permitted, Inheritable: s.caps[0].Inheritable},
			{Permitted: s.caps[1].Permitted, Inheritable: s.caps[1].Inheritable},
		}
	} else if !uidSet {
		return nil
	}
	h := capHeader
	if err := unix.Capset(&h, &caps[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// bornAs runs call, which makes a file or directory, on a locked OS thread
// whose filesystem uid and gid are own's (-1 or 0: the server's) and
// whose capabilities are the server's (setfsuid drops the file ones; they
// are raised again): what call makes is own's from its first moment, and
// the server's rights make it, as before. A thread whose identity cannot
// be set makes it as the server (the caller's chown then gives it its
// owner, as it always did); one that cannot be given back panics
// (restore). A filesystem that judges a caller by its ids alone (a FUSE
// one such as GlusterFS's or MooseFS's client, which sees no capability)
// refuses call there (EACCES, EPERM): it is then made as the server, and
// given by the caller's chown, as before.
func bornAs(own Owner, call func() error) error {
	if own.Uid <= 0 && own.Gid <= 0 || os.Geteuid() != 0 {
		return call()
	}
	err := asOwner(own, call)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		err = call()
	}
	return err
}

// asOwner runs call on a locked thread that becomeOwner made own's, and
// gives the thread back as it was; a thread that could not be made own's
// runs call as the server.
func asOwner(own Owner, call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := becomeOwner(own)
	if err != nil {
		restore(s)
		return call()
	}
	defer restore(s) // before the unlock: deferred calls run last first
	return call()
}

// becomeOwner gives the current (locked) thread own's filesystem ids (an
// id of -1 or 0 leaves the server's) and keeps its capabilities; what it
// changed is returned for restore.
func becomeOwner(own Owner) (*threadCred, error) {
	return switchThread(threadSwitch{
		gid: ownerID(own.Gid), uid: ownerID(own.Uid),
		keepCaps: true,
	})
}

// ownerID is an Owner's id as switchThread takes it: -1 (leave the
// server's) for one that is not above 0.
func ownerID(id int) int64 {
	if id > 0 {
		return int64(id)
	}
	return -1
}

// restore puts back what switchThread changed, last first; it panics when it
// cannot (the thread would otherwise serve others as a user).
func restore(s *threadCred) {
	if s == nil {
		return
	}
	fail := func(what string, err error) {
		if err != nil {
			panic(fmt.Sprintf("storefs: cannot give a thread its identity back (%s): %v", what, err))
		}
	}
	if s.fsuid >= 0 {
		fail("setfsuid", setFsid(unix.SYS_SETFSUID, s.fsuid))
	}
	if s.fsgid >= 0 {
		fail("setfsgid", setFsid(unix.SYS_SETFSGID, s.fsgid))
	}
	if s.haveCap {
		h := capHeader
		caps := s.caps
		fail("capset", unix.Capset(&h, &caps[0]))
	}
	if s.groupOK {
		fail("setgroups", setThreadGroups(s.groups))
	}
}

// setFsid sets the thread's fsuid or fsgid (trap is SYS_SETFSUID or
// SYS_SETFSGID) and checks that it took: the call returns the previous
// value and no error, so a second call with -1 (which changes nothing)
// reads what is set now.
func setFsid(trap uintptr, id int) error {
	unix.RawSyscall(trap, uintptr(id), 0, 0)
	if now := fsid(trap); now != id {
		return fmt.Errorf("set filesystem id %d (syscall %d): still %d", id, trap, now)
	}
	return nil
}

// fsid is the thread's fsuid or fsgid now.
func fsid(trap uintptr) int {
	now, _, _ := unix.RawSyscall(trap, uintptr(^uint32(0)), 0, 0)
	return int(uint32(now))
}

// threadGroups are the current thread's supplementary groups.
func threadGroups() ([]uint32, error) {
	buf := make([]uint32, 256)
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, uintptr(len(buf)), uintptr(unsafe.Pointer(&buf[0])), 0)
	if e != 0 {
		return nil, fmt.Errorf("getgroups: %w", e)
	}
	return buf[:n], nil
}

// setThreadGroups sets the current thread's supplementary groups only
// (Go's syscall.Setgroups changes every thread of the process).
func setThreadGroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return e
	}
	return nil
}
