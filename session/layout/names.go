package layout

import (
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
)

// Caller is who asked: the uid and gid the kernel reported (FUSE context or
// SO_PEERCRED), the supplementary groups read from /proc when known, and the
// process id (a thread-group id) for the record.
type Caller struct {
	Uid, Gid uint32
	Groups   []uint32
	Pid      int
}

// CtlPerm is the permission bits a ctl file is shown with, of its
// session directory's mode: read and write where the directory has them
// (fs shows it so; a relayed write is checked against the same bits).
const CtlPerm = 0o666

// VirtualPerm is the permission bits a virtual file is shown with, of its
// directory's mode: ctl and the index values SPEC 9 lets users write
// read-write (CtlPerm), the list and by-cwd entries read-only.
func VirtualPerm(pl Place) os.FileMode {
	if pl.Kind == PlaceCtl || pl.WritableIndex() {
		return CtlPerm
	}
	return 0o444
}

// Permits is the kernel's permission check of the caller against a file
// of owner uid, group gid and permission bits mode: every bit of want
// (4 read, 2 write, 1 search, or several) in the owner's class for its
// owner, the group's for its members, the others' for everyone else;
// root passes (CAP_DAC_OVERRIDE: no execution is asked here).
func (c Caller) Permits(uid, gid uint32, mode, want os.FileMode) bool {
	mode = mode.Perm()
	switch {
	case c.Uid == 0:
		return true
	case c.Uid == uid:
		return (mode>>6)&want == want
	case c.InGroup(gid):
		return (mode>>3)&want == want
	}
	return mode&want == want
}

// InGroup says whether gid is the caller's group or one of its
// supplementary groups (the kernel's group class of a permission check).
func (c Caller) InGroup(gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Container names the session/ directory of one agent or model in one home
// or shared space: the unit that owns an index.
type Container struct {
	Home  string // "home/<uid>" or "shared/<space>"; "" for temp sessions
	Kind  string // abi.KindAgent or abi.KindModel
	Owner string // the agent name, or "provider/model"
}

// Ref names one session.
type Ref struct {
	Container
	Name string // the session name
	Temp bool   // temp scope: memory only, no directory, never listed
}

// PrivateHome is the Home of uid's private sessions.
func PrivateHome(uid uint32) string { return "home/" + itoa(uid) }

// HomeUid is the uid whose private home home is ("home/1001"); false for
// a shared space's or a malformed one.
func HomeUid(home string) (uint32, bool) {
	s, ok := strings.CutPrefix(home, "home/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// SharedHome is the Home of a shared space.
func SharedHome(space string) string { return "shared/" + space }

// SpaceOf is the shared space whose Home home is; "" for a uid's home.
func SpaceOf(home string) string {
	if space, ok := strings.CutPrefix(home, "shared/"); ok {
		return space
	}
	return ""
}

// Rel is the container's session/ directory relative to the store (and to
// the mount root): home/1000/agent/coder/session or
// home/1000/model/openai/gpt-4.d/session.
func (c Container) Rel() string { return c.join("") }

// Rel is the session directory relative to the store root.
func (r Ref) Rel() string { return r.Container.join(r.Name) }

// join is the path of name in the container's session/ directory (the
// directory itself for ""): path.Join's, made as one string when its
// parts are clean names, as every valid one is. Every append through the
// mount names its session, and joining the directory and then the name
// was a visible share of an append
// (docs/benchmarks.md#appends-through-one-descriptor).
func (c Container) join(name string) string {
	kind, owner := "agent", c.Owner
	if c.Kind == abi.KindModel {
		kind, owner = "model", c.Owner+".d"
	}
	sep := "/"
	if name == "" {
		sep = ""
	}
	p := c.Home + "/" + kind + "/" + owner + "/session" + sep + name
	if cleanRel(p) {
		return p
	}
	return path.Join(c.Home, kind, owner, "session", name)
}

// cleanRel reports whether p is a relative path path.Clean leaves as it
// is: no empty, "." or ".." element.
func cleanRel(p string) bool {
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			switch p[start:i] {
			case "", ".", "..":
				return false
			}
			start = i + 1
		}
	}
	return true
}

// ChrootRel is the agent's chroot runtime tree relative to the store root
// ("" for model sessions, which have no chroot). Shared sessions run in the
// requesting uid's own agent root.
func (c Container) ChrootRel(uid uint32) string {
	if c.Kind != abi.KindAgent {
		return ""
	}
	home := c.Home
	if strings.HasPrefix(home, "shared/") {
		home = PrivateHome(uid)
	}
	return path.Join(home, "agent", c.Owner, "root")
}

// ParseContainerRel is the inverse of Container.Rel for paths below it: it
// splits a store-relative path into the container it lies in and the rest
// ("" for the session/ directory itself, "index/list", "default/state", ...).
// ok is false for paths that do not lie inside a session/ directory.
func ParseContainerRel(rel string) (c Container, rest string, ok bool) {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	if len(parts) < 4 {
		return c, "", false
	}
	switch parts[0] {
	case "home", "shared":
	default:
		return c, "", false
	}
	c.Home = parts[0] + "/" + parts[1]
	var n int
	switch {
	case parts[2] == abi.KindAgent && len(parts) >= 5 && parts[4] == "session":
		c.Kind, c.Owner, n = abi.KindAgent, parts[3], 5
	case parts[2] == abi.KindModel && len(parts) >= 6 && strings.HasSuffix(parts[4], ".d") && parts[5] == "session":
		c.Kind, c.Owner, n = abi.KindModel, parts[3]+"/"+strings.TrimSuffix(parts[4], ".d"), 6
	default:
		return c, "", false
	}
	return c, strings.Join(parts[n:], "/"), true
}

func itoa(u uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(b[i:])
		}
	}
}

// Valid reports whether c's owner is a valid agent name or provider/model.
func (c Container) Valid() bool {
	if c.Kind == abi.KindModel {
		return abi.ValidModelName(c.Owner)
	}
	return c.Kind == abi.KindAgent && abi.ValidName(c.Owner)
}

// StateDir is the server's own bookkeeping in the store (never history).
const StateDir = ".ctxfs"

// Key names r in the engine's caches: its store path, or, for a temp
// session (which has none), its home, kind, owner and name.
func (r Ref) Key() string {
	if r.Temp {
		return "temp:" + r.Home + ":" + r.Kind + ":" + r.Owner + ":" + r.Name
	}
	return r.Rel()
}

// MaxValueFile bounds what is read of a single-value file or meta.json
// (a value written through the mount is at most 1 MiB).
const MaxValueFile = 1<<20 + 1

// SearchDir is the search index of a home or space.
const SearchDir = ".search"
