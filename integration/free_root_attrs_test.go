package integration

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestFreeRootTakesOwnersAttrs: an agent's root/ and a session's context/
// are free trees (SPEC 2), their owner's to chmod, chgrp and touch as any
// directory of its own: rebuilding root/ with `cp -a src/. root/` or
// `tar -x -C root` sets root/'s own mode and times. The change is made
// as the user on the directory itself; made by name in its parent, a
// directory of the store closed to users, it was EACCES for the owner,
// and cp -a and tar failed. Another uid is still refused, and the session
// directory above context/ (history) keeps its mode (EPERM).
func TestFreeRootTakesOwnersAttrs(t *testing.T) {
	s := newFuseServer(t)
	u1 := &cred{uid: 1001, gid: 1001}
	agent := s.mnt("home/1001/agent/c")
	if out, err := bashAs(t, u1, "mkdir -p "+agent+"/session/s"); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	for _, dir := range []string{agent + "/root", agent + "/session/s/context"} {
		script := "set -e; cd " + dir + "; chmod 750 .; chgrp 1001 .; touch -d @1000000000 .; stat -c '%a %u:%g %Y' ." +
			"; src=$(mktemp -d); touch -d @1100000000 $src; chmod 700 $src; cp -a $src/. ./; rmdir $src; stat -c '%a %Y' ."
		out, err := bashAs(t, u1, script)
		if err != nil || out != "750 1001:1001 1000000000\n700 1100000000\n" {
			t.Fatalf("%s: the owner's chmod, chgrp, touch and cp -a: %v %q", dir, err, out)
		}
		if st := statStore(t, s.storePath(dir)); st.Mode&0o7777 != 0o700 || st.Uid != 1001 || st.Mtim.Sec != 1100000000 {
			t.Errorf("%s on the store: mode %o uid %d mtime %d", dir, st.Mode&0o7777, st.Uid, st.Mtim.Sec)
		}
		before := storeSnapshot(t, s)
		out, err = bashAs(t, &cred{uid: 1002, gid: 1002}, "chmod 777 "+dir+" || touch "+dir)
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("%s: another uid's chmod: %v %q", dir, err, out)
		}
		testkit.Same(t, "another uid's chmod of "+dir, before, storeSnapshot(t, s))
	}
	sess := filepath.Join(agent, "session/s")
	before := storeSnapshot(t, s)
	out, err := bashAs(t, u1, "chmod 755 "+sess)
	if err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("chmod of a session directory: %v %q, want EPERM", err, out)
	}
	testkit.Same(t, "chmod of a session directory", before, storeSnapshot(t, s))
	testkit.WantErrno(t, "root's rmdir of root/", syscall.Rmdir(agent+"/root"), syscall.EPERM)
}

// TestCleaningRootKeepsSessions: SPEC 2: cleaning or rebuilding an
// agent's root/ never touches session/. The owner's rm -rf of root/ (its
// contents go; root/ itself is an ABI entry, EPERM) and a rebuild with
// cp -a leave every byte of the agent's sessions as it was (behaviour
// unchanged; no test held it).
func TestCleaningRootKeepsSessions(t *testing.T) {
	s := newFuseServer(t)
	u1 := &cred{uid: 1001, gid: 1001}
	agent := s.mnt("home/1001/agent/coder")
	s.sendAs(u1, "k", "k0", "", "first")
	if out, err := bashAs(t, u1, "set -e; mkdir -p "+agent+"/root/home/agent/.cache "+agent+"/session/k/context/sub; echo x > "+agent+"/root/home/agent/.cache/f; ln -s ../../session "+agent+"/root/up; echo y > "+agent+"/session/k/context/sub/g"); err != nil {
		t.Fatalf("set-up: %v %s", err, out)
	}
	settle()
	sessions := filepath.Join(s.store, "home/1001/agent/coder/session")
	before := testkit.Snapshot(t, sessions, nil)
	out, err := bashAs(t, u1, "rm -rf "+agent+"/root")
	if err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("rm -rf root: %v %q, want root/ itself EPERM", err, out)
	}
	if out, err := bashAs(t, u1, "set -e; src=$(mktemp -d); mkdir $src/bin; echo z > $src/bin/tool; cp -a $src/. "+agent+"/root/; rm -rf $src; ls -A "+agent+"/root"); err != nil || out != "bin\n" {
		t.Errorf("rebuild of root/: %v %q", err, out)
	}
	settle()
	testkit.Same(t, "cleaning and rebuilding root/", before, testkit.Snapshot(t, sessions, nil))
}
