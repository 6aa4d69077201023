package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Issue 19, findings 1 and 7: the mount root and the store are the
// server's, and no path of theirs is followed through a symlink.

// userOwned is the unprivileged user who prepares a root of their own.
var userOwned = &cred{uid: 1001, gid: 1001}

// mountAttempt is a background `ctxfs mount` of root and store: its
// output and whether it failed. Should it serve (the bug), it is
// unmounted when the test ends.
func mountAttempt(t *testing.T, bin, root, store string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "mount", "--root", root, "--store", store).CombinedOutput()
	if err == nil {
		t.Cleanup(func() { exec.Command(bin, "umount", "--root", root).Run() })
	}
	return string(out), err
}

// sendAsUser sends "hi" to the socket at sock as uid 1001 and returns
// the raw reply (or the client's complaint).
func sendAsUser(t *testing.T, sock string) string {
	out, _ := runCmd(t, userOwned, nil, "/usr/bin/python3", "-c", sockRequest, sock, `{"op":"send","id":"a","session":"s","input":"hi"}`)
	return out
}

// wantRefusedFor1001 sends as uid 1001 to the socket sock below root and
// wants the definition refused: EACCES naming dir as writable by uid 1001.
func wantRefusedFor1001(t *testing.T, root, sock, dir string) {
	t.Helper()
	out := sendAsUser(t, filepath.Join(root, sock))
	if !strings.Contains(out, `"code":"EACCES"`) || !strings.Contains(out, dir+" is writable by its owner, uid 1001") {
		t.Errorf("send to %s: want EACCES naming %s, got:\n%s", sock, dir, out)
	}
}

// stickyBase is a fresh directory like /tmp: root's, mode 1777, where
// anyone may make a directory of their own first.
func stickyBase(t *testing.T) string {
	base := t.TempDir()
	openToAll(t, base)
	testkit.Must(t, os.Chmod(base, os.ModeSticky|0o777))
	return base
}

// keyListener is a TCP listener of the test that counts the connections
// it gets: an endpoint a user's model definition names.
func keyListener(t *testing.T) (addr string, conns *atomic.Int32) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testkit.Must(t, err)
	t.Cleanup(func() { l.Close() })
	conns = new(atomic.Int32)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), conns
}

// TestMountRefusesUserOwnedRoot: uid 1001 makes the mount root (as they
// could with /tmp/ctx) and prepares the three attacks of finding 1 in it:
// a model whose endpoint is their listener and whose api_key_file names
// root's key, a symlink at an agent's socket to a root-only file, and a
// chroot agent whose env preloads their library into root's trampoline.
// The mount is refused naming the root and the fix; nothing is made in
// the root or the store; the listener gets nothing; root's files keep
// their bytes and modes. (On the old tree the mount served, and uid
// 1001's send to the model sent root's key to the listener.)
func TestMountRefusesUserOwnedRoot(t *testing.T) {
	requireFUSE(t)
	base := stickyBase(t)
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	key, secret := filepath.Join(base, "root-key"), filepath.Join(base, "root-file")
	testkit.Must(t, os.WriteFile(key, []byte("sk-root-secret\n"), 0o600))
	testkit.Must(t, os.WriteFile(secret, []byte("root only\n"), 0o600))
	addr, conns := keyListener(t)
	prepare := fmt.Sprintf(`set -e
mkdir -p %[1]s/model/evil/m.d %[1]s/agent/coder.d %[1]s/agent/jailed.d
cd %[1]s/model/evil/m.d
echo openai-chat > api; echo http://%[2]s/v1 > endpoint; echo m > model_id; echo %[3]s > api_key_file
echo debug/echo > %[1]s/agent/coder.d/model
ln -s %[4]s %[1]s/agent/coder.sock
echo chroot > %[1]s/agent/jailed.d/isolation
echo LD_PRELOAD=%[1]s/evil.so > %[1]s/agent/jailed.d/env
printf '#!/bin/sh\necho hi\n' > %[1]s/agent/jailed; chmod 755 %[1]s/agent/jailed
`, root, addr, key, secret)
	if out, err := bashAs(t, userOwned, prepare); err != nil {
		t.Fatalf("uid 1001 prepares %s: %v\n%s", root, err, out)
	}
	before := hostSnapshot(t, root)
	keyBefore, secretBefore := hostSnapshot(t, key), hostSnapshot(t, secret)

	out, err := mountAttempt(t, ctxfsBin, root, store)
	if err == nil {
		// The old tree served: uid 1001 asks their model for a reply.
		sendAsUser(t, filepath.Join(root, "model/evil/m.sock"))
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("uid 1001's listener got %d connections", n)
	}
	if err == nil || !strings.Contains(out, "mount root "+root) || !strings.Contains(out, "chown root:root "+root) {
		t.Fatalf("mount of a root uid 1001 owns: %v\n%s", err, out)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, root)); len(diffs) > 0 {
		t.Errorf("the refused mount changed %s:\n%s", root, strings.Join(diffs, "\n"))
	}
	for what, b := range map[string]map[string]string{key: keyBefore, secret: secretBefore} {
		if diffs, _ := hostDiffs(b, hostSnapshot(t, what)); len(diffs) > 0 {
			t.Errorf("root's %s changed:\n%s", what, strings.Join(diffs, "\n"))
		}
	}
	if _, err := os.Lstat(store); !os.IsNotExist(err) {
		t.Errorf("the refused mount made the store %s: %v", store, err)
	}
	// ctx doctor says the same, with the fix.
	out, _ = runCmd(t, nil, []string{"CTX_ROOT=" + root, "CTXFS_STORE=" + store}, ctxBin, "doctor")
	if !strings.Contains(out, "problem: owners of "+root+": "+root+" is writable by its owner, uid 1001") ||
		!strings.Contains(out, "fix: chown root:root "+root+" && chmod go-w "+root) {
		t.Errorf("ctx doctor on a root uid 1001 owns:\n%s", out)
	}
}

// TestMountRefusesOpenAgentDir: a root-owned ROOT/agent that every user
// may write (0777) is refused, naming it and the fix, and nothing is made.
func TestMountRefusesOpenAgentDir(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent"), 0o755))
	testkit.Must(t, os.Chmod(filepath.Join(root, "agent"), 0o777))
	before := hostSnapshot(t, root)
	out, err := mountAttempt(t, ctxfsBin, root, store)
	agentDir := filepath.Join(root, "agent")
	if err == nil || !strings.Contains(out, agentDir+" is writable by every user") || !strings.Contains(out, "chmod go-w "+agentDir) {
		t.Fatalf("mount with a 0777 agent/: %v\n%s", err, out)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, root)); len(diffs) > 0 {
		t.Errorf("the refused mount changed %s:\n%s", root, strings.Join(diffs, "\n"))
	}
	if _, err := os.Lstat(store); !os.IsNotExist(err) {
		t.Errorf("the refused mount made the store: %v", err)
	}
}

// TestMountRefusesSymlinks: a store path or a root path that is a
// symlink is refused (finding 7: the store's target was chmodded 0700 and
// filled, with fs.protected_symlinks=0), and the link's target is left as
// it was: mode, owner and content.
func TestMountRefusesSymlinks(t *testing.T) {
	requireFUSE(t)
	for _, which := range []string{"store", "root"} {
		t.Run(which, func(t *testing.T) {
			base := stickyBase(t)
			target := filepath.Join(base, "target")
			testkit.Must(t, os.Mkdir(target, 0o755))
			testkit.Must(t, os.WriteFile(filepath.Join(target, "kept"), []byte("kept\n"), 0o644))
			link := filepath.Join(base, "link")
			testkit.Must(t, os.Symlink(target, link))
			root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
			if which == "store" {
				store = link
			} else {
				root = link
			}
			before := hostSnapshot(t, base)
			out, err := mountAttempt(t, ctxfsBin, root, store)
			if err == nil || !strings.Contains(out, which) || !strings.Contains(out, link+" is a symlink") {
				t.Fatalf("mount with the %s a symlink: %v\n%s", which, err, out)
			}
			if diffs, _ := hostDiffs(before, hostSnapshot(t, base)); len(diffs) > 0 {
				t.Errorf("the refused mount changed %s:\n%s", base, strings.Join(diffs, "\n"))
			}
		})
	}
}

// TestDefinitionsOthersCanChange: under a root-owned root, a model whose
// provider directory uid 1001 owns (its endpoint their listener, its
// api_key_file root's key), and an agent whose NAME.d every user may
// write, are refused when used: EACCES naming the directory and the fix,
// and the listener gets nothing. (On the old tree the model sent root's
// key to the listener.)
func TestDefinitionsOthersCanChange(t *testing.T) {
	requireFUSE(t)
	addr, conns := keyListener(t)
	var key string
	s := newFuseServerWith(t, func(s *server) {
		key = filepath.Join(filepath.Dir(s.root), "root-key")
		testkit.Must(t, os.WriteFile(key, []byte("sk-root-secret\n"), 0o600))
		m := filepath.Join(s.root, "model", "evil", "m.d")
		testkit.Must(t, os.MkdirAll(m, 0o755))
		for f, v := range map[string]string{"api": "openai-chat", "endpoint": "http://" + addr + "/v1", "model_id": "m", "api_key_file": key} {
			testkit.Must(t, os.WriteFile(filepath.Join(m, f), []byte(v+"\n"), 0o644))
		}
		testkit.Must(t, os.Chown(filepath.Join(s.root, "model", "evil"), 1001, 1001))
		s.define("open", map[string]string{"env": "LD_PRELOAD=/nonexistent.so\n"})
		testkit.Must(t, os.Chmod(filepath.Join(s.root, "agent", "open.d"), 0o777))
	})
	for sock, dir := range map[string]string{
		"model/evil/m.sock": filepath.Join(s.root, "model", "evil"),
		"agent/open.sock":   filepath.Join(s.root, "agent", "open.d"),
	} {
		out := sendAsUser(t, filepath.Join(s.root, sock))
		if !strings.Contains(out, `"code":"EACCES"`) || !strings.Contains(out, dir+" is writable by") || !strings.Contains(out, "chmod go-w "+dir) {
			t.Errorf("send to %s: want EACCES naming %s and the fix, got:\n%s", sock, dir, out)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the listener uid 1001's model names got %d connections", n)
	}
}

// TestProgramLinkOthersCanChange: an agent's program that is a symlink
// to a root-owned executable in a directory uid 1001 owns, and a
// compact.d/ strategy in a compact.d uid 1001 owns, are refused when
// used: EACCES naming that directory. uid 1001 could rename root's file
// away and put its own there between the server's check and its exec,
// and every user's runs would run it. (On the old tree the linked
// program ran: only the file at the end of the link was checked.)
func TestProgramLinkOthersCanChange(t *testing.T) {
	requireFUSE(t)
	udir := filepath.Join(stickyBase(t), "u")
	s := newFuseServerWith(t, func(s *server) {
		testkit.Must(t, os.Mkdir(udir, 0o755))
		prog := filepath.Join(udir, "prog")
		testkit.Must(t, os.WriteFile(prog, []byte("#!/bin/sh\necho linked-ran\n"), 0o755))
		testkit.Must(t, os.Chown(udir, 1001, 1001))
		s.define("linked", map[string]string{"abi": "text"})
		testkit.Must(t, os.Symlink(prog, filepath.Join(s.root, "agent", "linked")))
		s.define("compacting", map[string]string{"compact.strategy": "mine\n"})
		cd := filepath.Join(s.root, "agent", "compacting.d", "compact.d")
		testkit.Must(t, os.Mkdir(cd, 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(cd, "mine"), []byte("#!/bin/sh\ncat\n"), 0o755))
		testkit.Must(t, os.Chown(cd, 1001, 1001))
	})
	for sock, dir := range map[string]string{
		"agent/linked.sock":     udir,
		"agent/compacting.sock": filepath.Join(s.root, "agent", "compacting.d", "compact.d"),
	} {
		wantRefusedFor1001(t, s.root, sock, dir)
	}
}

// TestProgramLinkHopOthersCanChange: a program reached through a link
// met on the way (agent/hop -> a/l1/prog, a/l1 -> c/l2, c/l2 -> d), in
// a directory (c) uid 1001 owns, is refused when used: EACCES naming
// it. The directories above the path (a) and above where it ends (d)
// are root's, so a check of those alone let it run, while uid 1001 could
// point l2 at a directory of their own between the check and the exec.
func TestProgramLinkHopOthersCanChange(t *testing.T) {
	requireFUSE(t)
	base := stickyBase(t)
	a, c, d := filepath.Join(base, "a"), filepath.Join(base, "c"), filepath.Join(base, "d")
	s := newFuseServerWith(t, func(s *server) {
		for _, dir := range []string{a, c, d} {
			testkit.Must(t, os.Mkdir(dir, 0o755))
		}
		testkit.Must(t, os.WriteFile(filepath.Join(d, "prog"), []byte("#!/bin/sh\necho hop-ran\n"), 0o755))
		testkit.Must(t, os.Symlink(d, filepath.Join(c, "l2")))
		testkit.Must(t, os.Symlink("../c/l2", filepath.Join(a, "l1")))
		testkit.Must(t, os.Chown(c, 1001, 1001))
		s.define("hop", map[string]string{"abi": "text"})
		testkit.Must(t, os.Symlink(filepath.Join(a, "l1", "prog"), filepath.Join(s.root, "agent", "hop")))
	})
	wantRefusedFor1001(t, s.root, "agent/hop.sock", c)
}

// TestDefinitionDirLinkOthersCanChange: an agent whose NAME.d is a
// symlink to a root-owned directory inside one uid 1001 owns is refused
// when used: EACCES naming that directory. uid 1001 could put another
// NAME.d there, whose control files are links to root's files elsewhere
// (each read checks only the file it reaches). (On the old tree it ran:
// only the directory at the end of the link was checked.)
func TestDefinitionDirLinkOthersCanChange(t *testing.T) {
	requireFUSE(t)
	udir := filepath.Join(stickyBase(t), "u")
	s := newFuseServerWith(t, func(s *server) {
		testkit.Must(t, os.MkdirAll(filepath.Join(udir, "d.d"), 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(udir, "d.d", "abi"), []byte("text\n"), 0o644))
		testkit.Must(t, os.Chown(udir, 1001, 1001))
		testkit.Must(t, os.Symlink(filepath.Join(udir, "d.d"), filepath.Join(s.root, "agent", "dirlinked.d")))
		testkit.Must(t, os.WriteFile(filepath.Join(s.root, "agent", "dirlinked"), []byte("#!/bin/sh\necho dir-linked-ran\n"), 0o755))
	})
	wantRefusedFor1001(t, s.root, "agent/dirlinked.sock", udir)
}

// TestControlFileLinkOthersCanChange: an agent whose AGENTS.md is a
// symlink to a root-owned file in a directory uid 1001 owns is refused
// when used: EACCES naming that directory. uid 1001 could put there a
// link to any file root alone may read (each read checks only the file
// it reaches), and its text would go into every run's rules. (On the old
// tree it ran.)
func TestControlFileLinkOthersCanChange(t *testing.T) {
	requireFUSE(t)
	udir := filepath.Join(stickyBase(t), "u")
	s := newFuseServerWith(t, func(s *server) {
		testkit.Must(t, os.Mkdir(udir, 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(udir, "AGENTS.md"), []byte("be brief\n"), 0o644))
		testkit.Must(t, os.Chown(udir, 1001, 1001))
		s.define("ruled", map[string]string{})
		testkit.Must(t, os.Symlink(filepath.Join(udir, "AGENTS.md"), filepath.Join(s.root, "agent", "ruled.d", "AGENTS.md")))
	})
	// What uid 1001 may do in its directory: root's file replaced by a
	// link to a file root alone may read.
	secret := filepath.Join(filepath.Dir(s.root), "root-only")
	testkit.Must(t, os.WriteFile(secret, []byte("root-only-secret\n"), 0o600))
	testkit.Must(t, os.Remove(filepath.Join(udir, "AGENTS.md")))
	testkit.Must(t, os.Symlink(secret, filepath.Join(udir, "AGENTS.md")))
	wantRefusedFor1001(t, s.root, "agent/ruled.sock", udir)
	shown, _ := runCmd(t, userOwned, nil, "/bin/sh", "-c", "cat "+s.root+"/home/1001/agent/ruled/session/s/AGENTS.md")
	if strings.Contains(shown, "root-only-secret") {
		t.Errorf("uid 1001 read root's file through the session's AGENTS.md: %q", shown)
	}
}

// TestKeyFileDirOthersCanChange: a model whose api_key_file is root's
// file in a directory below one uid 1001 owns is refused at its run:
// EACCES naming that directory, and the endpoint gets nothing. uid 1001
// could put there a link to another directory, and the server would
// send (or hand a CLI, which runs as the user) whatever root-only file
// of that name it holds. (On the old tree the key was read and sent:
// only the file was checked.)
func TestKeyFileDirOthersCanChange(t *testing.T) {
	requireFUSE(t)
	addr, conns := keyListener(t)
	udir := filepath.Join(stickyBase(t), "u")
	s := newFuseServerWith(t, func(s *server) {
		testkit.Must(t, os.MkdirAll(filepath.Join(udir, "keys"), 0o755))
		key := filepath.Join(udir, "keys", "key")
		testkit.Must(t, os.WriteFile(key, []byte("sk-root-secret\n"), 0o600))
		testkit.Must(t, os.Chown(udir, 1001, 1001))
		m := filepath.Join(s.root, "model", "p", "m.d")
		testkit.Must(t, os.MkdirAll(m, 0o755))
		for f, v := range map[string]string{"api": "openai-chat", "endpoint": "http://" + addr + "/v1", "model_id": "m", "api_key_file": key} {
			testkit.Must(t, os.WriteFile(filepath.Join(m, f), []byte(v+"\n"), 0o644))
		}
	})
	wantRefusedFor1001(t, s.root, "model/p/m.sock", udir)
	if n := conns.Load(); n != 0 {
		t.Errorf("the endpoint got %d connections", n)
	}
}
