package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// An agent's root/ that a crash left the server's (a kill between the
// mkdir that makes it and the chown that follows: TestHistoryFaultSchedules
// met one in CI, and fsck named it "owner 0:0, expected 2004") is its
// user's again at the user's next send: the run works in it, and fsck is
// clean. Before, it stayed root's for good: the user could not write in
// it, and fsck failed. Here the crash's leftover is made by hand.
func TestChrootOwnerMended(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "s", "c1", "", "hello")
	root := filepath.Join(s.store, "home/1001/agent/coder/root")
	testkit.Must(t, os.Chown(root, 0, 0))
	if out, code := s.fsck(); code != 1 {
		t.Fatalf("fsck of the leftover: exit %d, want 1\n%s", code, out)
	}
	s.sendAs(u, "s", "c2", "", "again")
	var st syscall.Stat_t
	testkit.Must(t, syscall.Stat(root, &st))
	if st.Uid != 1001 || st.Gid != 1001 {
		t.Errorf("root/ after the user's send: owner %d:%d, want 1001:1001", st.Uid, st.Gid)
	}
	if out, err := runCmd(t, u, nil, "touch", s.mnt("home/1001/agent/coder/root/mine")); err != nil {
		t.Errorf("the user's touch in root/: %v %s", err, out)
	}
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck after the send: exit %d\n%s", code, out)
	}

	// A root/ root gave to another uid by hand stays theirs.
	testkit.Must(t, os.Chown(root, 1002, 1002))
	s.sendAs(u, "s", "c3", "", "third")
	testkit.Must(t, syscall.Stat(root, &st))
	if st.Uid != 1002 {
		t.Errorf("root/ given to uid 1002 by root: owner %d after uid 1001's send, want 1002 (left as it is)", st.Uid)
	}
	testkit.Must(t, os.Chown(root, 1001, 1001))
}
