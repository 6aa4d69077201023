package integration

import (
	"strings"
	"testing"
)

// TestListCopiesCounted: every open of index/list holds a copy of the
// list until its last close. The copies were not counted: a user with a
// few hundred sessions (a list of 26 KB) and the 1,024 files a uid may
// hold open made the server hold 26 MB of them, and with more sessions
// gigabytes. They count now with the opener's unfinished bytes, as the
// copies of a session's read-only files do (16 MiB per uid): an open past
// them is EAGAIN.
func TestListCopiesCounted(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "a", "c1", "", "hello")
	dir := s.mnt("home/1001/agent/coder/session")
	script := `ulimit -n 4096; cd "$1" || exit 1
mkdir $(printf 's%063d ' $(seq 400)) || exit 1
n=0
while [ $n -lt 1000 ]; do exec {fd}<index/list || break; n=$((n+1)); done
echo "opens $n of $(stat -c %s index/list) bytes"`
	out, err := runCmd(t, uid1001, nil, "/bin/bash", "-c", script, "bash", dir)
	t.Logf("%v %s", err, out)
	if !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("1,000 opens of index/list of 26 KB as uid 1001: %q, want EAGAIN past 16 MiB of copies", out)
	}
	// Closed, the copies are given back.
	eventually(t, afterClose, "an open of index/list once the others are closed", func() bool {
		out, err := runCmd(t, uid1001, nil, "/bin/bash", "-c", `exec {a}<"$1"/index/list {b}<"$1"/index/list && echo ok`, "bash", dir)
		return err == nil && out == "ok\n"
	})
}
