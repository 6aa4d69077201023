package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// What a user can make the server hold through open files of the mount,
// measured as the user would make it: a helper as uid 1001 keeps its
// descriptors open while the test reads the server's resident memory.

// holdOpen runs a Python script as c that opens what it holds, prints one
// line starting "ready" and keeps everything open until its stdin is
// closed. It returns the line after "ready", and release, which ends the
// holder (so does the test's end).
func holdOpen(t *testing.T, c *cred, script string, args ...string) (line string, release func()) {
	t.Helper()
	stdin, keep, err := os.Pipe() // the helper holds until keep is closed
	testkit.Must(t, err)
	defer stdin.Close()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid}}
	cmd.Dir, cmd.Stdin, cmd.Stderr = "/", stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	testkit.Must(t, err)
	testkit.Must(t, cmd.Start())
	var once sync.Once
	release = func() { once.Do(func() { keep.Close(); stopProcess(cmd, syscall.SIGKILL) }) }
	t.Cleanup(release)
	said := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		said <- l
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-said:
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "ready"); ok {
			return strings.TrimSpace(rest), release
		}
		t.Fatalf("the holder as %s said %q", credName(c), l)
	case <-time.After(120 * time.Second):
		t.Fatalf("the holder as %s was not ready within 120 s", credName(c))
	}
	return "", release
}

// holdingServer is a server whose uid 1001 (the cred returned) has a
// session q of agent coder: the user these tests hold things open as.
func holdingServer(t *testing.T) (*server, *cred) {
	s := newServer(t)
	openToAll(t, s.root)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "q", "c1", "", "hello")
	return s, u
}

// heldBy runs script as u (holdOpen) and returns what it said and how
// many MiB the server grew by while it held what it opened.
func (s *server) heldBy(t *testing.T, u *cred, script string, args ...string) (got string, grown int, release func()) {
	base := vmKB(t, s.cmd.Process.Pid, "VmRSS")
	got, release = holdOpen(t, u, script, args...)
	return got, s.serverGrowth(t, base), release
}

// serverGrowth is how much the server's resident memory grew since base
// (KiB), in MiB, once a second has let its collector run.
func (s *server) serverGrowth(t *testing.T, base int) int {
	time.Sleep(time.Second)
	return (vmKB(t, s.cmd.Process.Pid, "VmRSS") - base) / 1024
}

// writesHolder opens a file N times and writes on each descriptor,
// keeping them all open: 1 MiB of lines that are not JSON, with O_APPEND
// ("lines"), or of an unfinished meta.json ("value"); or, on a ctl, the
// request line its fourth argument is, then reading nothing ("request")
// or the first byte of the reply ("request-read"). It prints how many
// writes ended with each errno, or else "written" or the byte read.
const writesHolder = `
import errno, os, sys
path, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data, flags = {
    'lines': (b'x\n' * (1 << 19), os.O_WRONLY | os.O_APPEND),
    'value': (b'{' + b' ' * ((1 << 20) - 1), os.O_WRONLY),
}.get(kind) or (sys.argv[4].encode() + b'\n', os.O_RDWR)
fds, got = [], {}
for i in range(n):
    fds.append(os.open(path, flags))
    try:
        os.write(fds[-1], data)
        e = os.read(fds[-1], 1).decode() if kind == 'request-read' else 'written'
    except OSError as err:
        e = errno.errorcode[err.errno]
    got[e] = got.get(e, 0) + 1
print('ready', ' '.join('%s=%d' % kv for kv in sorted(got.items())), flush=True)
sys.stdin.read()
`

// heldWrites has uid 1001 write 1 MiB of kind (writesHolder) on 300
// descriptors of file in its session, kept open, and fails the test
// unless the writes answered want, the store's file is as it was and the
// server grew by 64 MiB at most (what 300 descriptors' 1 MiB each would
// pass many times over).
func heldWrites(t *testing.T, file, kind, want string) {
	s, u := holdingServer(t)
	stored := s.sessionDir(1001, "coder", "q") + "/" + file
	before := fileBytes(t, stored)
	got, grown, _ := s.heldBy(t, u, writesHolder, s.mnt("home/1001/agent/coder/session/q/"+file), "300", kind)
	t.Logf("300 writes of 1 MiB (%s) to %s on open descriptors: %s; the server grew by %d MiB", kind, file, got, grown)
	if got != want {
		t.Errorf("the writes answered %s; want %s", got, want)
	}
	if after := fileBytes(t, stored); after != before {
		t.Errorf("%s changed in the store: %d bytes, %d before", file, len(after), len(before))
	}
	if grown > 64 {
		t.Errorf("the server holds %d MiB more for the 300 descriptors", grown)
	}
}

// TestRefusedWritesNotHeld: a user's 300 descriptors of its own log, each
// refused a write of 1 MiB (EINVAL) and kept open, write nothing and make
// the server hold almost nothing (each descriptor kept a copy of its
// refused write, outside the user's 16 MiB of unfinished bytes: the same
// took the server from 21 to 521 MiB).
func TestRefusedWritesNotHeld(t *testing.T) {
	heldWrites(t, "messages.jsonl", "lines", "EINVAL=300")
}

// dirHolder makes a directory of the free tree with N files, opens each
// directory it is given once, then opens the big one up to M times,
// reading each (the server lists it, and keeps the listing until the
// last close), keeping all open, and then tries one file. It prints how
// many directories it holds, the errnos of the opens and first reads
// refused (a directory whose read is refused is closed), and what the
// file's open answered.
const dirHolder = `
import errno, os, sys
big, nfiles, tries, file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.makedirs(big, exist_ok=True)
for i in range(nfiles):
    open('%s/a-file-with-a-longish-name-%06d' % (big, i), 'w').close()
def opened(path, flags):
    try:
        return os.open(path, flags), None
    except OSError as err:
        return None, errno.errorcode[err.errno]
fds, refused = [], {}
for d in sys.argv[5:] + [big] * tries:
    fd, e = opened(d, os.O_RDONLY | os.O_DIRECTORY)
    if not e:
        try:
            os.listdir(fd)
            fds.append(fd)
            continue
        except OSError as err:
            os.close(fd)
            e = errno.errorcode[err.errno]
    refused[e] = refused.get(e, 0) + 1
fd, e = opened(file, os.O_RDONLY)
print('ready', len(fds), ' '.join('%s=%d' % kv for kv in sorted(refused.items())), 'file:', e or 'opened', flush=True)
sys.stdin.read()
`

// TestDirHandlesCounted: directories open through the mount count against
// their opener's quota of open files (CTXFS_LIMITS open=16), with its
// files: uid 1001 opens one of each kind of directory (a mount's root,
// its home, a session container, the index, a session, its agent's
// root/, a directory in it), then a directory of 3,000 files 300 times,
// reading each. It holds 16 and no more, every open past them is EMFILE,
// and so is a file's; the server holds a few MiB for them (300 held
// listings took it from 21 to 118 MiB with 2,000 files); once closed,
// they may be opened again.
func TestDirHandlesCounted(t *testing.T) {
	s := limitedServer(t, "open=16", nil)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "q", "c1", "", "hello")
	coder := s.mnt("home/1001/agent/coder")
	kinds := []string{s.mnt("home"), s.mnt("home/1001"), coder + "/session", coder + "/session/index", coder + "/session/q", coder + "/root"}
	big, file := coder+"/root/d", coder+"/session/q/messages.jsonl"
	base := vmKB(t, s.cmd.Process.Pid, "VmRSS")
	got, release := holdOpen(t, u, dirHolder, append([]string{big, "3000", "300", file}, kinds...)...)
	grown := s.serverGrowth(t, base)
	t.Logf("uid 1001, open=16: %s; the server grew by %d MiB", got, grown)
	if want := fmt.Sprintf("16 EMFILE=%d file: EMFILE", len(kinds)+300-16); got != want {
		t.Errorf("directories held: %s; want %s", got, want)
	}
	if grown > 48 {
		t.Errorf("the server holds %d MiB more for uid 1001's open directories", grown)
	}
	reopen := `
import os, sys
fds = []
try:
    while len(fds) < 20:
        fds.append(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY))
except OSError as e:
    print(len(fds), e.strerror)
`
	release()
	eventually(t, 10*time.Second, "the places of closed directories given back", func() bool {
		out, _ := runCmd(t, u, nil, "/usr/bin/python3", "-c", reopen, big)
		return strings.TrimSpace(out) == "16 Too many open files"
	})
}

// TestDirListingsCounted: what an open directory holds, its listing from
// the first read to the last close, counts with its opener's unfinished
// bytes (16 MiB), not only as one of its open files. uid 1001 fills a
// directory of its root/ with 30,000 names (a listing of 2 MiB) and opens
// and reads it 200 times, keeping each open: the server lists it 7 times,
// the other reads are EAGAIN, it grows by a few tens of MiB (each held
// listing was counted only as one of the uid's 1,024 open files: 200 took
// the server 986 MiB further, and 1,024 listings of a directory of
// 200,000 names, the uid's inode bound, would take tens of GiB), another
// file still opens, and once the directories are closed the listing is
// made again.
func TestDirListingsCounted(t *testing.T) {
	s, u := holdingServer(t)
	big, file := s.mnt("home/1001/agent/coder/root/d"), s.mnt("home/1001/agent/coder/session/q/messages.jsonl")
	// Made and listed once first: what the mount keeps of each name it
	// showed (its node) is the names', not the listings'.
	if got, release := holdOpen(t, u, dirHolder, big, "30000", "1", file); strings.Join(strings.Fields(got), " ") != "1 file: opened" {
		t.Fatalf("a directory of 30,000 names made and listed: %s", got)
	} else {
		release()
	}
	got, grown, release := s.heldBy(t, u, dirHolder, big, "0", "200", file)
	t.Logf("uid 1001 read a directory of 30,000 names on 200 descriptors: %s; the server grew by %d MiB", got, grown)
	if want := "7 EAGAIN=193 file: opened"; got != want {
		t.Errorf("listings held: %s; want %s", got, want)
	}
	if grown > 64 { // 40 measured: 7 listings, and the garbage of 193 refused ones
		t.Errorf("the server holds %d MiB more for uid 1001's listings", grown)
	}
	release()
	eventually(t, 10*time.Second, "the listings' bytes given back", func() bool {
		out, err := runCmd(t, u, nil, "/bin/sh", "-c", `ls -f "$1" | wc -l`, "sh", big)
		return err == nil && strings.TrimSpace(out) == "30000"
	})
}

// TestValueCopiesCounted: a reader's open of a value (meta.json here)
// holds a copy of it until the last close, counted with the opener's
// unfinished bytes (16 MiB). uid 1001 rewrites its meta.json with 1 MB of
// new text and opens it for reading, 300 times, keeping each open: once
// the copies take the share, the opens (and the rewrites, whose buffers
// count there too) are EAGAIN, and the server grows by a few tens of
// MiB (41 measured). The copies were counted nowhere: each rewrite made
// the engine read a new copy for the next open while the descriptors kept
// the old ones, 1 MiB on each of the uid's 1,024 open files (300 took the
// server 534 MiB further).
func TestValueCopiesCounted(t *testing.T) {
	s, u := holdingServer(t)
	meta := s.mnt("home/1001/agent/coder/session/q/meta.json")
	got, grown, release := s.heldBy(t, u, `
import collections, errno, json, os, sys
path, n = sys.argv[1], int(sys.argv[2])
meta, fds, got = json.load(open(path)), [], collections.Counter()
def rewrite(i):
    meta['pad'] = ('%06d' % i) * 166666
    w = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(w, (json.dumps(meta) + '\n').encode())
    finally:
        os.close(w)
for i in range(n):
    try:
        rewrite(i)
    except OSError:
        pass # past the share the rewrite is refused too
    try:
        fds.append(os.open(path, os.O_RDONLY))
        got['opened'] += 1
    except OSError as err:
        got[errno.errorcode[err.errno]] += 1
print('ready', ' '.join('%s=%d' % kv for kv in sorted(got.items())), flush=True)
sys.stdin.read()
`, meta, "300")
	t.Logf("uid 1001 rewrote and opened its meta.json of 1 MB 300 times: %s; the server grew by %d MiB", got, grown)
	// 16 copies fit; 15 when the last rewrite's buffer is still counted
	// (the kernel releases a closed file after close returns).
	if got != "EAGAIN=284 opened=16" && got != "EAGAIN=285 opened=15" {
		t.Errorf("the opens answered %s; want EAGAIN past 15 or 16 copies of 1 MB", got)
	}
	if grown > 64 {
		t.Errorf("the server holds %d MiB more for uid 1001's copies of meta.json", grown)
	}
	release()
	eventually(t, 10*time.Second, "meta.json opened once the copies are given back", func() bool {
		out, err := runCmd(t, u, nil, "/bin/sh", "-c", `head -c 1 "$1"`, "sh", meta)
		return err == nil && out == "{"
	})
}

// TestValueWritersCounted: a value open for writing is buffered until
// its last close, counted in its writer's 16 MiB of unfinished bytes:
// of 300 descriptors of meta.json each written 1 MiB and kept open, 16
// take the share, the other writes are EAGAIN, nothing reaches the
// store, and the server holds about the share (each descriptor held its
// 1 MiB uncounted: 386 MiB for 300).
func TestValueWritersCounted(t *testing.T) {
	heldWrites(t, "meta.json", "value", "EAGAIN=284 written=16")
}

// heldResumes appends a line of 1 MB to events (as uid 1001), then has
// 1001 hold ctl, a file of s's mount, open 400 times with req written on
// each and, if read, the first byte of each reply read (writesHolder).
// It returns what the holder printed, how much s grew by (MiB) and
// release, which ends the holder.
func heldResumes(t *testing.T, s *server, events, ctl, req string, read bool) (got string, grown int, release func()) {
	if out, err := bashAs(t, uid1001, `python3 -c 'print("{\"type\":\"note\",\"text\":\"" + "a" * 1000000 + "\"}")' >> `+events); err != nil {
		t.Fatalf("a 1 MB line appended to events.jsonl: %v %q", err, out)
	}
	kind := "request"
	if read {
		kind = "request-read"
	}
	base := vmKB(t, s.cmd.Process.Pid, "VmRSS")
	got, release = holdOpen(t, uid1001, writesHolder, ctl, "400", kind, req)
	return got, s.serverGrowth(t, base), release
}

// TestCtlFramesReadInPartCounted: what a ctl reader leaves unread of a
// frame counts with its uid's unfinished bytes (16 MiB). A user who
// opened its ctl 400 times, each a resume whose first frame is a 1 MB
// line of its events.jsonl, and read one byte of each, made the server
// hold the rest of every frame (1,081 MiB; nothing bounded their count
// but its 1,024 open files): a frame past the uid's share is not served,
// its reply ending with one EAGAIN error frame, whole lines either way.
func TestCtlFramesReadInPartCounted(t *testing.T) {
	s := newServer(t)
	openToAll(t, s.root)
	events, run := s.firstRunOfK()
	ctl, req := s.mnt(uid1001CoderAt+"k/ctl"), `{"op":"resume","after":"`+run+`"}`
	got, grown, release := heldResumes(t, s, events, ctl, req, true)
	t.Logf("400 resumes, one byte of each read: %s; the server grew by %d MiB", got, grown)
	if got != "{=400" {
		t.Errorf("the first bytes read were %s, want {=400", got)
	}
	if grown > 160 { // a frame each is 400 MiB and more
		t.Errorf("the server holds %d MiB more for 400 frames read in part", grown)
	}
	out, err := bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '`+req+`' >&3; dd bs=1000 status=none <&3`)
	if err != nil || strings.Contains(out, "aaaa") || !strings.HasSuffix(out, "\n") || !strings.Contains(out, `"code":"EAGAIN"`) {
		t.Errorf("a resume read in pieces while the others hold the uid's share: %v %.300q, want its reply cut before the frame (EAGAIN)", err, out)
	}
	release()
	eventually(t, 5*time.Second, "a resume read in pieces once the others are closed", func() bool {
		out, err := bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '`+req+`' >&3; dd bs=1000 status=none <&3`)
		return err == nil && strings.Contains(out, strings.Repeat("a", 1000000)+`"`) && !strings.Contains(out, "EAGAIN")
	})
}
