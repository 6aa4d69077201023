package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesAlongCwdBounded: the AGENTS.md files along a run's cwd in its
// agent's root/ are merged into the session's AGENTS.md snapshot (in the
// store, root's) and the run's rules (in the server's memory) at most
// 1 MiB together: uid 1001 made 30 nested directories, each with a hard
// link to one AGENTS.md of 1 MiB (1.2 MB of its free trees), and a send
// with that cwd made the server hold and write a 30 MiB snapshot; a
// PATH_MAX-deep tree would have made it 2 GiB, for every run. Files that
// would take the rules past the bound are left out, as a file over it is.
func TestRulesAlongCwdBounded(t *testing.T) {
	s := newFuseServer(t)
	s.sendAs(uid1001, "a", "q1", "", "hello")
	script := `
import os, sys
os.chdir(sys.argv[1])
big = os.path.join(sys.argv[1], "big")
with open(big, "w") as f:
    f.write("r" * ((1 << 20) - 1) + "\n")
for i in range(30):
    os.mkdir("a")
    os.chdir("a")
    os.link(big, "AGENTS.md")
`
	if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", script, s.mnt("home/1001/agent/coder/root")); err != nil {
		t.Fatalf("making the tree as uid 1001: %v %s", err, out)
	}
	cwd := strings.TrimSuffix("/"+strings.Repeat("a/", 30), "/")
	s.sendAs(uid1001, "r", "q2", `,"cwd":"`+cwd+`"`, "hi")
	st, err := os.Stat(s.mnt("home/1001/agent/coder/session/r/AGENTS.md"))
	if err != nil {
		t.Fatalf("the session's AGENTS.md: %v", err)
	}
	if st.Size() > 1<<20+4096 {
		t.Errorf("the session's AGENTS.md snapshot: %d bytes from 1 MiB in root/, want at most 1 MiB", st.Size())
	}
	eventually(t, 10e9, "the snapshot written to the store", func() bool {
		_, err := os.Stat(filepath.Join(s.sessionDir(1001, "coder", "r"), "AGENTS.md"))
		return err == nil
	})
	if st, _ := os.Stat(filepath.Join(s.sessionDir(1001, "coder", "r"), "AGENTS.md")); st.Size() > 1<<20+4096 {
		t.Errorf("the store's AGENTS.md snapshot: %d bytes, want at most 1 MiB", st.Size())
	}
}
