package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// fillFile appends chunk-sized writes to a file (created when missing)
// until limit bytes are written or a write fails, and prints how many
// bytes the writes took and the errno name of the failure ("none").
const fillFile = `
import errno, os, sys
path, chunk, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
done, err = 0, "none"
while done < limit:
    try:
        n = os.write(fd, b"q" * chunk)
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
    done += n  # a short write (a full disk) is followed by the failing one
try:
    os.close(fd)
except OSError as e:
    err = err + "+close:" + errno.errorcode[e.errno]
print(done, err)
`

// createFiles creates empty files dir/f0, dir/f1, … until n are made or a
// create fails, and prints how many were made and the errno name.
const createFiles = `
import errno, os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    try:
        os.close(os.open(os.path.join(d, "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as e:
        print(i, errno.errorcode[e.errno])
        sys.exit(0)
print(n, "none")
`

// pyAs runs a python script as c and returns its output's two fields.
func pyAs(t *testing.T, c *cred, script string, args ...string) (int64, string) {
	t.Helper()
	out, err := runCmd(t, c, nil, "/usr/bin/python3", append([]string{"-c", script}, args...)...)
	if err != nil {
		t.Fatalf("python as %s %v: %v\n%s", credName(c), args, err, out)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("python as %s %v: %q", credName(c), args, out)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	testkit.Must(t, err)
	return n, f[1]
}

// uid1002 is the other user of these tests.
var uid1002 = &cred{uid: 1002, gid: 1002}

// userTrees makes (by a send) c's session name and returns the mount
// paths of its agent's root/ and of the session's context/.
func (s *server) userTrees(t *testing.T, c *cred, session string) (root, context string) {
	s.sendAs(c, session, "make-"+session, "", "hello")
	agent := fmt.Sprintf("home/%d/agent/coder", c.uid)
	root, context = s.mnt(agent+"/root"), s.mnt(agent+"/session/"+session+"/context")
	for _, d := range []string{root, context} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	return root, context
}

// storePath is where a mount path of the free trees lies in the store.
func (s *server) storePath(mnt string) string {
	rel, err := filepath.Rel(s.root, mnt)
	if err != nil {
		panic(err)
	}
	return filepath.Join(s.store, rel)
}

// TestFreeTreeQuota: uid 1001 writes into its agent's root/ and its
// session's context/ past its byte quota (CTXFS_LIMITS freebytes): the
// write that passes it is EDQUOT, the bytes before it are in the store
// and nothing of the refused write; past its inode quota a create is
// EDQUOT and makes nothing. What it made is its own on the store. uid
// 1002 sends and writes meanwhile. After a restart the count is the same
// (a write is still refused) and a removal makes room again.
func TestFreeTreeQuota(t *testing.T) {
	const quota, chunk = 1 << 20, 64 << 10
	s := limitedServer(t, fmt.Sprintf("freebytes=%d,freeinodes=40", quota), nil)
	root, context := s.userTrees(t, uid1001, "q")
	otherRoot, _ := s.userTrees(t, uid1002, "other")

	// Half the quota in root/, then context/ until refused.
	half, why := pyAs(t, uid1001, fillFile, filepath.Join(root, "half"), fmt.Sprint(chunk), fmt.Sprint(quota/2))
	if half != quota/2 || why != "none" {
		t.Fatalf("half the quota in root/: %d bytes, %s", half, why)
	}
	fill := filepath.Join(context, "fill")
	got, why := pyAs(t, uid1001, fillFile, fill, fmt.Sprint(chunk), fmt.Sprint(2*quota))
	if why != "EDQUOT" {
		t.Fatalf("writing past the quota in context/: %d bytes, then %s; want EDQUOT", got, why)
	}
	// The directories (4 KiB each) and the two files take the quota.
	if total := half + got; total > quota || total+chunk+3*4096 <= quota {
		t.Fatalf("refused after %d bytes in all, quota %d", total, quota)
	}
	if st := statStore(t, s.storePath(fill)); st.Size != got || st.Uid != 1001 || st.Gid != 1001 {
		t.Fatalf("the store's file after the refusal: size %d (written %d), owner %d:%d, want 1001:1001", st.Size, got, st.Uid, st.Gid)
	}
	// A new file of one chunk, anywhere: refused at its write.
	if n, why := pyAs(t, uid1001, fillFile, filepath.Join(root, "more"), fmt.Sprint(chunk), fmt.Sprint(chunk)); why != "EDQUOT" || n != 0 {
		t.Fatalf("a write in root/ past the quota: %d bytes, %s", n, why)
	}
	if st := statStore(t, s.storePath(filepath.Join(root, "more"))); st.Size != 0 || st.Uid != 1001 {
		t.Fatalf("the refused write's file: size %d owner %d", st.Size, st.Uid)
	}

	// Meanwhile uid 1002 sends and writes.
	s.sendAs(uid1002, "other", "o2", "", "still here")
	if n, why := pyAs(t, uid1002, fillFile, filepath.Join(otherRoot, "mine"), fmt.Sprint(chunk), fmt.Sprint(quota/2)); n != quota/2 || why != "none" {
		t.Fatalf("uid 1002 writing its own root/: %d bytes, %s", n, why)
	}

	// Inodes: make room for bytes, then create files until refused.
	testkit.Must(t, os.Remove(fill))
	dir := filepath.Join(root, "many")
	if _, err := runCmd(t, uid1001, nil, "mkdir", dir); err != nil {
		t.Fatal(err)
	}
	made, why := pyAs(t, uid1001, createFiles, dir, "100")
	if why != "EDQUOT" || made > 40 || made < 30 {
		t.Fatalf("creating files past the inode quota (40): %d made, then %s", made, why)
	}
	if _, err := os.Lstat(s.storePath(filepath.Join(dir, fmt.Sprint("f", made)))); !os.IsNotExist(err) {
		t.Fatalf("the refused create left a file: %v", err)
	}
	if _, err := runCmd(t, uid1001, nil, "mkdir", filepath.Join(dir, "sub")); err == nil {
		t.Fatal("mkdir past the inode quota worked")
	}

	// The count holds after a restart; a removal makes room again.
	s.restart(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the mount after a restart", func() bool { return mountsAt(s.mnt("home")) == 1 })
	if n, why := pyAs(t, uid1001, createFiles, dir, "100"); why != "EEXIST" || n != 0 {
		t.Fatalf("f0 again: %d %s", n, why)
	}
	if _, err := runCmd(t, uid1001, nil, "touch", filepath.Join(dir, "new")); err == nil {
		t.Fatal("a create past the inode quota worked after a restart")
	}
	testkit.Must(t, os.Remove(filepath.Join(dir, "f0")))
	if out, err := runCmd(t, uid1001, nil, "touch", filepath.Join(dir, "new")); err != nil {
		t.Fatalf("a create after a removal: %v %s", err, out)
	}
}

// statStore stats a store path.
func statStore(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	testkit.Must(t, syscall.Lstat(p, &st))
	return &st
}

// smallExt4 makes an ext4 filesystem of size MiB in an image on a loop
// device (5% of its blocks reserved for root, mkfs's default), mounts it
// and returns where; the mount, the loop device and the image go at
// cleanup, after the server stops (cleanups run last first).
func smallExt4(t *testing.T, mib int) string {
	t.Helper()
	return ext4Image(t, mib, loopImageName()) // removeDeadLoops's, after a kill
}

// ext4Image is smallExt4 with the image's name.
func ext4Image(t *testing.T, mib int, name string) string {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	img := filepath.Join(base, name)
	f, err := os.Create(img)
	testkit.Must(t, err)
	testkit.Must(t, f.Truncate(int64(mib)<<20))
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "5", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	dir := filepath.Join(base, "ext4")
	testkit.Must(t, os.Mkdir(dir, 0o700))
	if out, err := exec.Command("mount", "-t", "ext4", dev, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v\n%s", dev, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// TestFreeTreeFillKeepsRootsReserve: on a small ext4, uid 1001 fills the
// disk through its root/ (its quota larger than the disk): the fill stops
// with ENOSPC at ext4's reserve for root, which the server's own writes
// (the free trees' writes run with the user's uid and no capability)
// leave alone; root's and uid 1002's sends still succeed.
func TestFreeTreeFillKeepsRootsReserve(t *testing.T) {
	disk := smallExt4(t, 96)
	s := limitedServer(t, "freebytes=1073741824", func(s *server) { s.store = filepath.Join(disk, "store") })
	root, _ := s.userTrees(t, uid1001, "fill")
	s.userTrees(t, uid1002, "other")
	s.send("mine", "m1", "before")

	got, why := pyAs(t, uid1001, fillFile, filepath.Join(root, "fill"), fmt.Sprint(1<<20), fmt.Sprint(200<<20))
	if why != "ENOSPC" {
		t.Fatalf("filling the disk as uid 1001: %d bytes, then %s; want ENOSPC", got, why)
	}
	var st syscall.Statfs_t
	testkit.Must(t, syscall.Statfs(disk, &st))
	reserve := (st.Bfree - st.Bavail) * uint64(st.Bsize)
	t.Logf("uid 1001 wrote %d MiB; %d KiB left free, %d KiB of them root's", got>>20, st.Bfree*uint64(st.Bsize)>>10, reserve>>10)
	// mkfs -m 5: 5% of the blocks are root's; all of them must be left.
	if st.Bfree < st.Blocks/20 {
		t.Fatalf("only %d KiB free after a user filled the disk, less than root's reserve of %d KiB", st.Bfree*uint64(st.Bsize)>>10, st.Blocks/20*uint64(st.Bsize)>>10)
	}
	if fst := statStore(t, s.storePath(filepath.Join(root, "fill"))); fst.Uid != 1001 {
		t.Fatalf("the fill file is owned by %d on the store", fst.Uid)
	}
	s.send("mine", "m2", "after the fill")
	s.sendAs(uid1002, "other", "o2", "", "after the fill")
	for i := 0; i < 5; i++ {
		s.sendAs(uid1002, "other", fmt.Sprint("o", i+3), "", strings.Repeat("x", 64<<10))
	}
}

// readWhileWrite opens a file for reading and for appending in both
// orders, and reads what the other descriptor wrote; it prints "ok", or
// the first failure.
const readWhileWrite = `
import os, sys
p = sys.argv[1]
try:
    w = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    r = os.open(p, os.O_RDONLY)
    os.write(w, b"one\n")
    assert os.pread(r, 100, 0) == b"one\n", "read after write"
    os.close(w); os.close(r)
    r = os.open(p, os.O_RDONLY)
    w = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(w, b"two\n")
    assert os.pread(r, 100, 0) == b"one\ntwo\n", "read after the second write"
    rw = os.open(p, os.O_RDWR)
    assert os.pread(rw, 100, 4) == b"two\n", "read of a read-write open"
    os.close(w); os.close(r); os.close(rw)
    print("ok")
except Exception as e:
    print("failed:", e)
`

// TestFreeTreeReadWhileWrite: a user's writes reach the server (no
// passthrough) while its reads go through the kernel's passthrough; the
// kernel lets both be open on one file at once, in either order, and each
// sees the other's bytes. Root reads the user's file meanwhile.
func TestFreeTreeReadWhileWrite(t *testing.T) {
	s := limitedServer(t, "freebytes=1048576", nil)
	root, _ := s.userTrees(t, uid1001, "rw")
	p := filepath.Join(root, "both")
	if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", readWhileWrite, p); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("reads and writes of one file as uid 1001: %v %s", err, out)
	}
	r, err := os.Open(p)
	testkit.Must(t, err)
	defer r.Close()
	if out, err := runCmd(t, uid1001, nil, "sh", "-c", "echo three >> "+p); err != nil {
		t.Fatalf("an append while root reads: %v %s", err, out)
	}
	if got := fileBytes(t, p); got != "one\ntwo\nthree\n" {
		t.Fatalf("the file as root reads it: %q", got)
	}
}

// TestStressNGFreeTreeAsUser: stress-ng's filesystem class, run as uid
// 1001 in its agent's root/ (every operation as the user, through the
// server, inside a quota larger than it needs) exits 0.
//
// Its stressors are processes of one uid and share that uid's 1,024 open
// files of the mount (internal/quota); the open stressor opens files until
// its own descriptor limit refuses one (20,000 here), so it could take the
// whole share and the others' opens were EMFILE, as the bound says (a CI
// run failed so). Each stressor's own limit is 256 descriptors
// (prlimit), so the share is larger than the run needs, like its bytes.
func TestStressNGFreeTreeAsUser(t *testing.T) {
	bin := stressNG(t)
	s := limitedServer(t, "freebytes=4294967296", nil)
	root, _ := s.userTrees(t, uid1001, "stress")
	dir := filepath.Join(root, "stress")
	if out, err := runCmd(t, uid1001, nil, "mkdir", dir); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	out, err := runCmdLimit(t, 90, "prlimit", "--nofile=256", "setpriv", "--reuid=1001", "--regid=1001", "--clear-groups", bin,
		"--class", "filesystem", "--exclude", "xattr,verity,fiemap,binderfs", "--all", "1",
		"--timeout", "8s", "--temp-path", dir, "--metrics-brief", "--verbose")
	if err != nil && !onlyMetricsUntrustworthy(err, out) {
		t.Fatalf("stress-ng as uid 1001: %v\n%s", err, out)
	}
	t.Logf("stress-ng:\n%s", lastLines(out, 15))
}

// teamGroup is the group of the space team of sharedContext.
const teamGroup = 1240

// sharedContext is a server where uids 1001 and 1002 (a and b) are
// members of the space team (teamGroup), each with 256 KiB of free-tree
// bytes, and the context/ of the shared session t1 that a made.
func sharedContext(t *testing.T) (s *server, a, b *cred, ctxDir string) {
	t.Helper()
	s = limitedServer(t, "freebytes=262144", nil)
	s.spaceAdd("team", teamGroup)
	a, b = member(1001, teamGroup), member(1002, teamGroup)
	s.sendAs(a, "t1", "t1", `,"scope":"shared","space":"team"`, "hello team")
	return s, a, b, s.mnt("shared/team/agent/coder/session/t1/context")
}

// TestFreeTreeSharedContext: in a shared session's context/, what a member
// makes is its own and the space's group's on the store (made with the
// space's group as its fs gid: FUSE sends no supplementary groups), and
// another member writes it through the group; the writes are charged to
// the file's owner, whose quota refuses the one that passes it.
func TestFreeTreeSharedContext(t *testing.T) {
	s, a, b, ctxDir := sharedContext(t)
	f := filepath.Join(ctxDir, "notes")
	if out, err := runCmd(t, a, nil, "sh", "-c", "umask 007 && mkdir "+ctxDir+"/d && echo first > "+f); err != nil {
		t.Fatalf("a member writes the shared context/: %v %s", err, out)
	}
	for _, p := range []string{f, filepath.Join(ctxDir, "d")} {
		if st := statStore(t, s.storePath(p)); st.Uid != 1001 || st.Gid != teamGroup {
			t.Fatalf("%s on the store: %d:%d, want 1001:%d", p, st.Uid, st.Gid, teamGroup)
		}
	}
	// In its own root/, a member gives a file to its group (chgrp by a
	// supplementary group, which FUSE does not send: read from /proc).
	own := filepath.Join(s.mnt("home/1001/agent/coder/root"), "mine")
	if out, err := runCmd(t, a, nil, "sh", "-c", "mkdir -p "+filepath.Dir(own)+" 2>/dev/null; echo x > "+own+" && chgrp "+fmt.Sprint(teamGroup)+" "+own); err != nil {
		t.Fatalf("chgrp to a group of the caller: %v %s", err, out)
	}
	if st := statStore(t, s.storePath(own)); st.Uid != 1001 || st.Gid != teamGroup {
		t.Fatalf("after chgrp: %d:%d", st.Uid, st.Gid)
	}
	if out, err := runCmd(t, a, nil, "chgrp", "0", own); err == nil {
		t.Fatalf("chgrp to root's group worked: %s", out)
	}
	if out, err := runCmd(t, b, nil, "sh", "-c", "echo second >> "+f); err != nil {
		t.Fatalf("another member appends through the group: %v %s", err, out)
	}
	n, why := pyAs(t, b, fillFile, f, "65536", "1048576")
	if why != "EDQUOT" || n >= 256<<10 {
		t.Fatalf("uid 1002 filling uid 1001's file: %d bytes, then %s; want EDQUOT within 1001's quota", n, why)
	}
	if st := statStore(t, s.storePath(f)); st.Size != n+int64(len("first\nsecond\n")) {
		t.Fatalf("the file after the refusal: %d bytes, want %d", st.Size, n+13)
	}
}

// TestFreeTreeQuotaAfterArchive: a session archived takes its context/
// out of the free trees, and the bytes it held out of its owner's quota.
func TestFreeTreeQuotaAfterArchive(t *testing.T) {
	s := limitedServer(t, "freebytes=262144", nil)
	root, context := s.userTrees(t, uid1001, "a")
	if _, why := pyAs(t, uid1001, fillFile, filepath.Join(context, "big"), "65536", "1048576"); why != "EDQUOT" {
		t.Fatalf("filling a's context/: %s, want EDQUOT", why)
	}
	s.userTrees(t, uid1001, "b") // a is no longer current
	frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"archive","session":"a"}`)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "archived" {
		t.Fatalf("archive a: %v %s", err, raw)
	}
	if n, why := pyAs(t, uid1001, fillFile, filepath.Join(root, "after"), "65536", "65536"); why != "none" || n != 65536 {
		t.Fatalf("a write after the archive: %d bytes, %s", n, why)
	}
}

// TestFreeTreeQuotaSeesJailedWrites: what a jailed program writes to its
// root/ goes through the jail's bind of the store, which the mount does
// not see; when the run ends its uid is counted again, so the uid's next
// write through the mount past its bound is EDQUOT, and nothing of it is
// written.
func TestFreeTreeQuotaSeesJailedWrites(t *testing.T) {
	const quota = 4 << 20
	s := newJailServer(t, "#!/bin/sh\nhead -c 6291456 /dev/zero > /big\n", true)
	s.env = append(s.env, fmt.Sprintf("CTXFS_LIMITS=freebytes=%d", quota))
	s.restart(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the mount after a restart", func() bool { return mountsAt(s.mnt("home")) == 1 })
	root := s.mnt(fmt.Sprintf("home/%d/agent/jailed/root", jailUser.uid))

	// The uid's use is counted (and small) before the run.
	if n, why := pyAs(t, jailUser, fillFile, filepath.Join(root, "before"), "4096", "4096"); n != 4096 || why != "none" {
		t.Fatalf("a write before the run: %d bytes, %s", n, why)
	}
	frames, text := s.jailSend(t, "fill", "f1", "go")
	if code := errorCode(frames); code != "" || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("the jailed run failed: %v\n%s", frames, text)
	}
	if st := statStore(t, s.storePath(filepath.Join(root, "big"))); st.Size != 6<<20 || st.Uid != jailUser.uid {
		t.Fatalf("the jailed program's file: size %d owner %d", st.Size, st.Uid)
	}
	after := filepath.Join(root, "after")
	if n, why := pyAs(t, jailUser, fillFile, after, "65536", "65536"); why != "EDQUOT" || n != 0 {
		t.Fatalf("a write past the bound after the jailed run: %d bytes, %s; want EDQUOT", n, why)
	}
	if st := statStore(t, s.storePath(after)); st.Size != 0 {
		t.Fatalf("the refused write left %d bytes", st.Size)
	}
}

// TestFreeQuotaCountsDeepTrees: the count of a uid's free trees walked
// by paths and left out what lies deeper than a path can name; a user
// made that by moving a directory below a deep one, archived any session
// (its uid is then counted again) and had the bytes back: 900 KiB kept
// deep, 900 KiB more written in a quota of 1 MiB, and so on without end.
func TestFreeQuotaCountsDeepTrees(t *testing.T) {
	s := limitedServer(t, "freebytes=1048576", nil)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "temp-b", "c1", "", "hello")
	s.sendAs(u, "a", "c2", "", "hello")
	// D: directories of 200-byte names as deep as a path can go; X: three
	// more levels and 900 KiB, moved two levels above D's bottom.
	script := `
import os, sys
ctx = os.open(sys.argv[1], os.O_RDONLY|os.O_DIRECTORY)
os.mkdir('D', dir_fd=ctx)
fds = [os.open('D', os.O_RDONLY|os.O_DIRECTORY, dir_fd=ctx)]
while True:
    try:
        os.mkdir('d'*200, dir_fd=fds[-1])
    except OSError:
        break
    fds.append(os.open('d'*200, os.O_RDONLY|os.O_DIRECTORY, dir_fd=fds[-1]))
os.mkdir('X', dir_fd=ctx)
cur = os.open('X', os.O_RDONLY|os.O_DIRECTORY, dir_fd=ctx)
for i in range(3):
    os.mkdir('e'*200, dir_fd=cur)
    cur = os.open('e'*200, os.O_RDONLY|os.O_DIRECTORY, dir_fd=cur)
f = os.open('big', os.O_WRONLY|os.O_CREAT, 0o600, dir_fd=cur)
os.write(f, b'x'*(900<<10))
os.close(f)
os.rename('X', 'X', src_dir_fd=ctx, dst_dir_fd=fds[-3])
print("ok")
`
	ctxDir := s.mnt("home/1001/agent/coder/session/a/context")
	if out, err := runCmd(t, u, nil, "/usr/bin/python3", "-c", script, ctxDir); err != nil || out != "ok\n" {
		t.Fatalf("deep tree: %v %s", err, out)
	}
	if frames, raw, err := s.requestAs(u, "coder", `{"op":"archive","session":"temp-b"}`); err != nil || len(frames) != 1 || frames[0]["type"] != "archived" {
		t.Fatalf("archive: %v %s", err, raw)
	}
	out, err := runCmd(t, u, nil, "/bin/bash", "-c", `head -c 921600 /dev/zero >"$0/more"`, ctxDir)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("900 KiB more after the count, in a quota of 1 MiB holding 900 KiB: %v %q", err, out)
	}
}
