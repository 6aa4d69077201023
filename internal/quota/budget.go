package quota

import "golang.org/x/sys/unix"

// FDsPerSession is what one loaded session holds: each log and its seal.
const FDsPerSession = 4

// SessionBudget is how many sessions the engine keeps loaded when nobody
// uses them: a quarter of the process's descriptor limit, so that at
// least three quarters stay for what users hold open through the mount,
// the sockets, the runs' pipes and the engine's own work (whose per-uid
// bounds keep any one user from taking them all). At least 16, at most
// 4096: beyond that, loading a session again costs less than the memory.
func SessionBudget() int {
	var rl unix.Rlimit
	n := 1024
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		n = int(rl.Cur)
	}
	return min(max(n/4/FDsPerSession, 16), 4096)
}
