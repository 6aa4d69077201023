package fs

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
)

// nobody is the caller when the kernel sent none: never root by accident.
const nobody = 65534

// callerOf is who made a FUSE request. The kernel sends the uid, gid and
// the id of the calling thread; the thread group id (the pid users know)
// and the supplementary groups (for shared spaces) come from /proc.
func callerOf(ctx context.Context) session.Caller {
	fc, ok := fuse.FromContext(ctx)
	if !ok {
		return session.Caller{Uid: nobody, Gid: nobody}
	}
	c := session.Caller{Uid: fc.Uid, Gid: fc.Gid, Pid: int(fc.Pid)}
	c.Pid, c.Groups = procStatus(int(fc.Pid), c.Pid)
	return c
}

// procStatus reads Tgid and Groups from /proc/<tid>/status. A thread that
// is already gone keeps its tid as pid and no groups.
func procStatus(tid, fallback int) (pid int, groups []uint32) {
	pid = fallback
	f, err := os.Open("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return pid, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), ":")
		switch key {
		case "Tgid":
			if n, err := strconv.Atoi(strings.TrimSpace(val)); err == nil {
				pid = n
			}
		case "Groups":
			for _, g := range strings.Fields(val) {
				if n, err := strconv.ParseUint(g, 10, 32); err == nil {
					groups = append(groups, uint32(n))
				}
			}
			return pid, groups
		}
	}
	return pid, groups
}
