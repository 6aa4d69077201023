package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"golang.org/x/sys/unix"
)

// sockRequest is a python3 client for one socket request: it connects
// (so the server sees the peer credentials of the uid running it), sends
// argv[2] and a newline, and copies every reply byte to stdout until EOF.
const sockRequest = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
while True:
    d = s.recv(65536)
    if not d:
        break
    sys.stdout.buffer.write(d)
    sys.stdout.buffer.flush()
`

// requestAs sends one request line to an agent's socket as c (nil is
// root) and returns the reply frames and the raw reply. A transport
// failure (the connection refused, a frame that is not JSON) is an error.
func (s *server) requestAs(c *cred, agent, line string) ([]frame, string, error) {
	s.t.Helper()
	return s.requestAsWithin(c, agent, line, cmdLimit)
}

// requestAsWithin is requestAs with its own deadline (a real CLI's run can
// take longer than a fake program's).
func (s *server) requestAsWithin(c *cred, agent, line string, limit time.Duration) ([]frame, string, error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", sockRequest, filepath.Join(s.root, "agent", agent+".sock"), line)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = testkit.ChildAttr()
	if c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	raw := stdout.String()
	if err != nil {
		return nil, raw, fmt.Errorf("socket client as %s: %v: %s", credName(c), err, strings.TrimSpace(stderr.String()))
	}
	var frames []frame
	sc := bufio.NewScanner(strings.NewReader(raw))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var f frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return frames, raw, fmt.Errorf("bad frame %q: %v", sc.Text(), err)
		}
		frames = append(frames, f)
	}
	return frames, raw, nil
}

var errnoName = regexp.MustCompile(`^E[A-Z0-9]+$`)

// checkErrorFrames fails the test for an error frame whose code is not an
// errno name.
func checkErrorFrames(t testing.TB, what string, frames []frame) {
	t.Helper()
	for _, f := range frames {
		if f["type"] != "error" {
			continue
		}
		if code, _ := f["code"].(string); !errnoName.MatchString(code) {
			t.Errorf("%s: error frame %v: code is not an errno name", what, f)
		}
	}
}

// errorCode is the code of the first error frame, "" when there is none.
func errorCode(frames []frame) string {
	for _, f := range frames {
		if f["type"] == "error" {
			c, _ := f["code"].(string)
			return c
		}
	}
	return ""
}

// errorMessage is the message of the first error frame, "" when there is
// none.
func errorMessage(frames []frame) string {
	for _, f := range frames {
		if f["type"] == "error" {
			m, _ := f["message"].(string)
			return m
		}
	}
	return ""
}

// hasFrame reports whether frames hold one of type typ.
func hasFrame(frames []frame, typ string) bool {
	for _, f := range frames {
		if f["type"] == typ {
			return true
		}
	}
	return false
}

// hostSnapshot maps every path under dir (and dir itself, as ".") to
// everything the host says about it: type and mode bits, owner, group,
// size, mtime, ctime, and the SHA-256 of a regular file's content or a
// symlink's target; and, under the key "<path> (atime)", its atime. Files
// and directories are read with O_NOATIME, so the snapshot itself changes
// nothing; a read or a listing by anyone else moves an atime (see
// primeAtimes). Unlike testkit.Snapshot it sees owners and times.
func hostSnapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(rel string)
	walk = func(rel string) {
		p := filepath.Join(dir, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			out[rel] = "lstat: " + err.Error()
			return
		}
		v := fmt.Sprintf("mode %07o owner %d:%d size %d mtime %d.%09d ctime %d.%09d",
			st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		out[rel+atimeKey] = fmt.Sprintf("atime %d.%09d", st.Atim.Sec, st.Atim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			v += " -> " + target
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("snapshot: open %s: %v", p, err)
			}
			f := os.NewFile(uintptr(fd), p)
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				t.Fatalf("snapshot: read %s: %v", p, err)
			}
			v += fmt.Sprintf(" sha256 %x", h.Sum(nil))
		case unix.S_IFDIR:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("snapshot: open %s: %v", p, err)
			}
			f := os.NewFile(uintptr(fd), p)
			names, err := f.Readdirnames(-1)
			f.Close()
			if err != nil {
				t.Fatalf("snapshot: list %s: %v", p, err)
			}
			sort.Strings(names)
			for _, n := range names {
				walk(filepath.Join(rel, n))
			}
		}
		out[rel] = v
	}
	walk(".")
	return out
}

const atimeKey = " (atime)"

// hostDiffs lists the differences between two hostSnapshots: changes of
// content, type, mode, owner, size, mtime or ctime, additions and
// removals; and, apart, moved atimes (reads and listings).
func hostDiffs(before, after map[string]string) (diffs, reads []string) {
	for k, v := range before {
		w, ok := after[k]
		switch {
		case strings.HasSuffix(k, atimeKey):
			if ok && w != v {
				reads = append(reads, fmt.Sprintf("read: %s (%s, then %s)", strings.TrimSuffix(k, atimeKey), v, w))
			}
		case !ok:
			diffs = append(diffs, fmt.Sprintf("removed: %s (was %s)", k, v))
		case w != v:
			diffs = append(diffs, fmt.Sprintf("changed: %s\n    before %s\n    after  %s", k, v, w))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok && !strings.HasSuffix(k, atimeKey) {
			diffs = append(diffs, fmt.Sprintf("added: %s (%s)", k, v))
		}
	}
	sort.Strings(diffs)
	sort.Strings(reads)
	return diffs, reads
}

// decoyUntouched fails the test unless the decoy tree is as it was: no
// byte, owner, mode or time changed, nothing added or removed, and
// nothing read or listed. A control tree beside it, which nothing in the
// test touches, tells reads by the test from reads by someone else on
// this machine (a find or grep over the temporary directory): when the
// control's atimes moved too, moved atimes of the decoy prove nothing and
// are only logged.
func decoyUntouched(t testing.TB, what string, before, after, controlBefore, controlAfter map[string]string) {
	t.Helper()
	diffs, reads := hostDiffs(before, after)
	cdiffs, creads := hostDiffs(controlBefore, controlAfter)
	if len(cdiffs) > 0 {
		t.Errorf("the control tree beside the decoy changed (something outside the test writes there?):\n%s", strings.Join(cdiffs, "\n"))
	}
	if len(diffs) > 0 {
		t.Errorf("%s: the decoy tree outside the store was written, created, chowned or chmodded:\n%s", what, strings.Join(diffs, "\n"))
	}
	switch {
	case len(reads) > 0 && len(creads) > 0:
		t.Logf("%s: the decoy and the untouched control tree were both read by someone (reads not judged):\n%s", what, strings.Join(reads, "\n"))
	case len(reads) > 0:
		t.Errorf("%s: the decoy tree outside the store was read or listed:\n%s", what, strings.Join(reads, "\n"))
	}
}

// storeLinks lists the symlinks in a store as "<path> -> <target>".
func storeLinks(store string) []string {
	var links []string
	filepath.WalkDir(store, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			links = append(links, p+" -> "+target)
		}
		return nil
	})
	return links
}

// primeAtimes sets the atime of everything under dir (not following
// symlinks) to one second after the epoch, mtimes untouched. Under
// relatime (or strictatime) the next read of a file or listing of a
// directory then moves its atime: a hostSnapshot taken after priming sees
// any read. It fails the test on a noatime mount, where it would prove
// nothing.
func primeAtimes(t testing.TB, dir string) {
	t.Helper()
	ts := []unix.Timespec{{Sec: 1}, {Nsec: unix.UTIME_OMIT}}
	// List first, then prime: the walk's own listings would move the
	// directories' atimes again.
	var paths []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatalf("prime atimes: %v", err)
		}
		paths = append(paths, p)
		return nil
	})
	for _, p := range paths {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("prime atimes: %s: %v", p, err)
		}
	}
	// A probe: reading a primed file must move its atime, else this
	// filesystem does not record reads and the check would be empty.
	probe := filepath.Join(filepath.Dir(dir), ".atime-probe")
	testkit.Must(t, os.WriteFile(probe, []byte("probe\n"), 0o600))
	defer os.Remove(probe)
	testkit.Must(t, unix.UtimesNanoAt(unix.AT_FDCWD, probe, ts, 0))
	if _, err := os.ReadFile(probe); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	testkit.Must(t, unix.Stat(probe, &st))
	if st.Atim.Sec == 1 {
		t.Fatalf("reads do not move atimes on the filesystem of %s (noatime?): a read of the decoy could not be seen", dir)
	}
}

// snapshotsKeepAtimes reports whether hostSnapshot leaves atimes as they
// were on the filesystem of store. It does on a local disk (its opens are
// O_NOATIME); MooseFS's client moves a listed directory's atime all the
// same, and there a moved atime proves no read by anyone else. The probe:
// a primed tree beside the store, snapshotted twice.
func snapshotsKeepAtimes(t testing.TB, store string) bool {
	t.Helper()
	d := filepath.Join(besideStore(t, store), "atimes")
	testkit.Must(t, os.MkdirAll(filepath.Join(d, "dir"), 0o700))
	testkit.Must(t, os.WriteFile(filepath.Join(d, "file"), []byte("probe\n"), 0o600))
	primeAtimes(t, d)
	_, reads := hostDiffs(hostSnapshot(t, d), hostSnapshot(t, d))
	return len(reads) == 0
}

// fsckNames reports whether fsck's output has a line "<path>: …".
func fsckNames(out, path string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, path+": ") {
			return true
		}
	}
	return false
}

// fsckLine is the first line of fsck's output that starts with prefix and
// contains want, "" when there is none.
func fsckLine(out, prefix, want string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, want) {
			return l
		}
	}
	return ""
}

// absPath finds absolute paths in a message: a slash-led run of path
// characters at the start or after a space, quote, bracket, '=' or ':'.
var absPath = regexp.MustCompile(`(?:^|[\s"'(\[=:])(/[^\s"'()\[\],;]+)`)

// checkHidesStore fails the test when an error frame's message shows the
// store's host path, or names an absolute path that is not under the
// mount root.
func checkHidesStore(t testing.TB, s *server, what string, frames []frame) {
	t.Helper()
	for _, f := range frames {
		if f["type"] != "error" {
			continue
		}
		b, _ := json.Marshal(f)
		if strings.Contains(string(b), s.store) {
			t.Errorf("%s: error frame shows the store's host path %s: %s", what, s.store, b)
		}
		msg, _ := f["message"].(string)
		for _, m := range absPath.FindAllStringSubmatch(msg, -1) {
			if p := m[1]; p != s.root && !strings.HasPrefix(p, s.root+"/") {
				t.Errorf("%s: error frame names %s, not a path under the mount root %s: %s", what, p, s.root, b)
			}
		}
	}
}

// uid1001 and member are the callers of these tests: uid 1001 alone, and
// uid 1001 in the given group.
var uid1001 = &cred{uid: 1001, gid: 1001}

func member(uid, group uint32) *cred { return &cred{uid: uid, gid: uid, groups: []uint32{group}} }

// credName says who c is, for messages.
func credName(c *cred) string {
	if c == nil {
		return "root"
	}
	return fmt.Sprintf("uid %d groups %v", c.uid, c.groups)
}

// spaceAdd makes a shared space with `ctxfs space add` on the store.
func (s *server) spaceAdd(name string, gid int) {
	s.t.Helper()
	out, err := runCmd(s.t, nil, nil, ctxfsBin, "space", "add", name, "--group", fmt.Sprint(gid), "--store", s.store)
	if err != nil {
		s.t.Fatalf("ctxfs space add %s: %v\n%s", name, err, out)
	}
}

// firstRunOfK sends "first" to uid 1001's session k (client id k0) and
// returns the session's events.jsonl and the run's id.
func (s *server) firstRunOfK() (events, run string) {
	s.t.Helper()
	s.sendAs(uid1001, "k", "k0", "", "first")
	events = s.mnt(uid1001CoderAt + "k/events.jsonl")
	m := regexp.MustCompile(`"run":"([^"]+)"`).FindStringSubmatch(fileBytes(s.t, events))
	if m == nil {
		s.t.Fatalf("no run in %s", fileBytes(s.t, events))
	}
	return events, m[1]
}

// sendAs sends input to session over the coder socket as c, with extra
// request fields (`,"scope":"shared","space":"team"`), and fails the test
// unless the run finished.
func (s *server) sendAs(c *cred, session, id, extra, input string) []frame {
	s.t.Helper()
	frames, raw, err := s.requestAs(c, "coder", fmt.Sprintf(`{"op":"send","id":%q,"session":%q%s,"input":%q}`, id, session, extra, input))
	if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		s.t.Fatalf("send as %s to %s: %v\n%s\nserver log:\n%s", credName(c), session, err, raw, lastLines(s.logText(), 20))
	}
	return frames
}

// settledSnapshot is hostSnapshot of dir once two of them a second and a
// bit apart agree (atimes aside; at most 10 tries): a filesystem that
// caches attributes for a second shows writes just made with stale ones
// for that long. On MooseFS (mfsattrcacheto's 1 s) the logs a start's
// recovery had just written showed a ctime older than their mtime, and a
// directory's size older than its names, until the cache let go, so a
// refused send looked like a write (ci67).
func settledSnapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	snap := hostSnapshot(t, dir)
	for try := 0; try < 10; try++ {
		time.Sleep(1100 * time.Millisecond)
		next := hostSnapshot(t, dir)
		if diffs, _ := hostDiffs(snap, next); len(diffs) == 0 {
			return next
		}
		snap = next
	}
	t.Fatalf("%s did not settle in 10 tries", dir)
	return nil
}
