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
func ProcStatus(tid int) (pid int, groups []uint32) {
	pid = tid
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
