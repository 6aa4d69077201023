package layout

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// ProcStatus reads the thread group id (the pid users know) and the
// supplementary groups of a thread from /proc/<tid>/status, for
// transports whose kernel report carries no groups (SO_PEERCRED, FUSE,
// whose pid is a thread id). A thread that is already gone keeps its tid
// as pid and has no groups.
//
// uid and gid are the ids the kernel reported with the request (FUSE's
// are the thread's filesystem ids). The status is taken as the caller's
// only while its filesystem uid and gid are those: a thread that exited
// and whose id another process took (or one that changed its ids since)
// is not the caller, and its groups would let the request into a space
// the caller's own are not in. It then counts as gone.
func ProcStatus(tid int, uid, gid uint32) (pid int, groups []uint32) {
	f, err := os.Open("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid, nil
	}
	defer f.Close()
	pid = tid
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), ":")
		switch key {
		case "Tgid":
			if n, err := strconv.Atoi(strings.TrimSpace(val)); err == nil {
				pid = n
			}
		case "Uid", "Gid":
			want := uid
			if key == "Gid" {
				want = gid
			}
			if !fsIDIs(val, want) {
				return tid, nil
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
	return tid, nil // no Groups line: not a status this reads
}

// fsIDIs reports whether a status line's ids ("real effective saved
// filesystem") end with the filesystem id want.
func fsIDIs(val string, want uint32) bool {
	ids := strings.Fields(val)
	if len(ids) != 4 {
		return false
	}
	n, err := strconv.ParseUint(ids[3], 10, 32)
	return err == nil && uint32(n) == want
}
