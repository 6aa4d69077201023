package integration

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Bounds on what a writer through the mount makes the server hold or
// spend, and no writable shared mapping of a log (issue 19, findings
// 10-12). Every writer here is uid 1001 (or 1002), never root: root is
// not counted by the quotas.

// sessionOf1001 makes uid 1001's coder session name with a send and
// returns its directory in the mount and in the store.
func sessionOf1001(s *server, name string) (mnt, store string) {
	s.t.Helper()
	s.sendAs(uid1001, name, name+"-1", "", "hello")
	return s.mnt("home/1001/agent/coder/session/" + name), s.sessionDir(1001, "coder", name)
}

// TestLogLongLineSmallWritesCPU: a line of 1 MiB (as stored, with its
// writer's uid) written through the mount in 16-byte writes, then its
// newline, is appended whole, and the server's CPU for it stays under a
// bound: each write used to copy and scan the whole pending line (18.8 s
// of CPU for this line). A line that passes 1 MiB without its newline is
// refused at the write that passes it, and nothing of it is written.
func TestLogLongLineSmallWritesCPU(t *testing.T) {
	s := newFuseServer(t)
	dir, store := sessionOf1001(s, "long")
	log, storeLog := filepath.Join(dir, "messages.jsonl"), filepath.Join(store, "messages.jsonl")
	const maxLine = 1 << 20
	head := `{"role":"user","content":"`
	line := head + strings.Repeat("x", maxLine-len(withUid(head+`"}`, 1001))) + `"}`
	script := `
import os, sys
path, size, piece, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
line = sys.stdin.buffer.read()
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
off = 0
try:
    while off < len(line):
        n = os.write(fd, line[off:off + piece])
        off += n
    if last:
        os.write(fd, last.encode())
    print("wrote", off)
except OSError as e:
    print("write at", off, os.strerror(e.errno))
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", os.strerror(e.errno))
`
	write := func(data string, piece int, last string) string {
		t.Helper()
		cmd := exec.Command("/usr/bin/python3", "-c", script, log, fmt.Sprint(len(data)), fmt.Sprint(piece), last)
		cmd.Stdin = strings.NewReader(data)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	pid := s.cmd.Process.Pid
	before := fileBytes(t, storeLog)
	cpu0 := processCPU(t, pid)
	out := write(line, 16, "\n")
	cpu := processCPU(t, pid) - cpu0
	t.Logf("1 MiB line in 16-byte writes: %s; server CPU %v", strings.ReplaceAll(out, "\n", "; "), cpu)
	if out != fmt.Sprintf("wrote %d\nclose ok", len(line)) {
		t.Fatalf("the long line was not taken: %s", out)
	}
	if got := fileBytes(t, storeLog); got != before+withUid(line, 1001)+"\n" {
		t.Fatalf("the log does not end in the line as written (%d bytes, want %d)", len(got), len(before)+len(withUid(line, 1001))+1)
	}
	// Generous: the linear handler took about 0.5 s here, the quadratic 19 s.
	if limit := 4 * time.Second; cpu > limit {
		t.Errorf("server CPU for a 1 MiB line in 16-byte writes: %v, over %v", cpu, limit)
	}

	// Over the limit without a newline: refused at the write that passes
	// 1 MiB (the 17th of 64 KiB), nothing written.
	before = fileBytes(t, storeLog)
	over := head + strings.Repeat("y", maxLine)
	if out := write(over, 64<<10, ""); out != fmt.Sprintf("write at %d Invalid argument\nclose Invalid argument", 16*64<<10) {
		t.Errorf("a line passing 1 MiB: %s", out)
	}
	// Just over as stored: the newline's write is refused.
	long := head + strings.Repeat("z", maxLine-len(withUid(head+`"}`, 1001))+1) + `"}`
	if out := write(long, 1<<20, "\n"); !strings.HasPrefix(out, fmt.Sprintf("write at %d Invalid argument", len(long))) {
		t.Errorf("a line of 1 MiB and one byte with its uid: %s", out)
	}
	if got := fileBytes(t, storeLog); got != before {
		t.Errorf("refused long lines changed the log")
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: %d\n%s", code, out)
	}
}

// heldRequests is a python3 program, run as a user, that opens argv[2]
// control files (argv[1]) and writes up to 1 MiB to each without a
// newline, reporting how each write went; then, for each line on stdin,
// it does what the line says to every handle whose write was taken
// ("read", "write") or writes 1 MiB to argv[3] handles whose write was
// refused ("again"), reporting the errno names it got.
const heldRequests = `
import errno, os, resource, sys
ctl, n, again = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
chunk = b"x" * (1 << 20)
took, refused, counts = [], [], {}
def note(counts, e):
    name = errno.errorcode.get(e, str(e)) if e else "ok"
    counts[name] = counts.get(name, 0) + 1
for i in range(n):
    fd = os.open(ctl, os.O_RDWR)
    try:
        os.write(fd, chunk)
        took.append(fd)
        note(counts, 0)
    except OSError as e:
        refused.append(fd)
        note(counts, e.errno)
print("write", sorted(counts.items()), flush=True)
for cmd in sys.stdin:
    cmd, counts = cmd.strip(), {}
    for fd in (took if cmd != "again" else refused[:again]):
        try:
            if cmd == "read":
                os.read(fd, 100)
            else:
                os.write(fd, chunk if cmd == "again" else b"x")
            note(counts, 0)
        except OSError as e:
            note(counts, e.errno)
    print(cmd, sorted(counts.items()), flush=True)
`

// TestCtlHalfWrittenRequests: uid 1001 opens 1,000 control files and
// writes 1 MiB without a newline to each. The server holds at most the
// uid's share of partial bytes (16 MiB): the writes past it fail EAGAIN
// and keep nothing, the server's memory stays bounded (it grew by 1 GB
// and stayed there), another uid's send still works, and a partial log
// line of uid 1001 (the same share) is EAGAIN too. After the
// request deadline (10 s) each held handle's read and write fail
// ETIMEDOUT, and the bytes are free again: 1 MiB writes are taken.
func TestCtlHalfWrittenRequests(t *testing.T) {
	s := newFuseServer(t)
	dir, _ := sessionOf1001(s, "half")
	pid := s.cmd.Process.Pid
	rssBefore := vmKB(t, pid, "VmRSS")

	cmd := exec.Command("/usr/bin/python3", "-c", heldRequests, filepath.Join(dir, "ctl"), "1000", "16")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	testkit.Must(t, err)
	stdout, err := cmd.StdoutPipe()
	testkit.Must(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); stopProcess(cmd, syscall.SIGKILL) })
	replies := bufio.NewScanner(stdout)
	reply := func(want string) {
		t.Helper()
		if !replies.Scan() {
			t.Fatalf("the held requests' program ended: %s", stderr.String())
		}
		if got := replies.Text(); got != want {
			t.Errorf("held requests: %s, want %s", got, want)
		}
	}
	ask := func(cmd, want string) {
		t.Helper()
		fmt.Fprintln(stdin, cmd)
		reply(want)
	}

	reply("write [('EAGAIN', 984), ('ok', 16)]")
	held := time.Now()
	rss := vmKB(t, pid, "VmRSS")
	t.Logf("server RSS %d KiB before, %d KiB with the requests held", rssBefore, rss)
	// The share (16 MiB), a garbage collector's worth again, and slack
	// for the FUSE request buffers.
	if limit := rssBefore + 96<<10; rss > limit {
		t.Errorf("server RSS %d KiB with the requests held, over %d KiB", rss, limit)
	}
	s.sendAs(&cred{uid: 1002, gid: 1002}, "other", "o-1", "", "still served")
	// The same share holds partial log lines: none fits now.
	log := filepath.Join(dir, "messages.jsonl")
	before := fileBytes(t, log)
	partial := `
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
try:
    os.write(fd, b'{"role":"user","content":"unfinished"')
    print("partial line taken")
except OSError as e:
    print("write", os.strerror(e.errno))
os.close(fd)
print("close ok")
`
	if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", partial, log); err != nil || out != "write Resource temporarily unavailable\nclose ok\n" {
		t.Errorf("a partial log line past the share: %v %s", err, out)
	}
	if fileBytes(t, log) != before {
		t.Errorf("a refused partial line changed the log")
	}

	time.Sleep(time.Until(held.Add(10*time.Second + 1500*time.Millisecond)))
	ask("read", "read [('ETIMEDOUT', 16)]")
	ask("write", "write [('ETIMEDOUT', 16)]")
	ask("again", "again [('ok', 16)]")
}

// TestLogWritableMmapRefused: uid 1001, who may append to its log, maps
// messages.jsonl (opened O_RDWR|O_APPEND) shared and writable: the kernel
// refuses (ENODEV), so no byte reaches the log or a reader behind the
// server's back, and the log is unchanged. (Through such a mapping a
// reader saw bytes the server refused, and a dirty page that stayed
// valid JSON was appended again at its writeback.) A private writable
// mapping changes nothing either.
func TestLogWritableMmapRefused(t *testing.T) {
	s := newFuseServer(t)
	script := `
import errno, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND)
size = os.fstat(fd).st_size
try:
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:2] = b'{}'
    m.flush()
    print("shared writable mapping made")
except OSError as e:
    print("shared", errno.errorcode[e.errno])
p = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
p[0:2] = b'{}'
p.close()
os.close(fd)
print("private ok")
`
	logKeptAs1001(t, s, "mm", script, "shared ENODEV\nprivate ok\n")
}

// logKeptAs1001 runs a python3 script as uid 1001 with the path of
// messages.jsonl of its session name (made first) in the mount, wants
// its output, and checks that the log kept its bytes, in the store and
// for a reader through the mount.
func logKeptAs1001(t *testing.T, s *server, name, script, want string) {
	t.Helper()
	dir, store := sessionOf1001(s, name)
	log, storeLog := filepath.Join(dir, "messages.jsonl"), filepath.Join(store, "messages.jsonl")
	before := fileBytes(t, storeLog)
	out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", script, log)
	if err != nil || out != want {
		t.Errorf("python as uid 1001: %v\n%s\nwant:\n%s", err, out, want)
	}
	if got := fileBytes(t, storeLog); got != before {
		t.Errorf("the log changed")
	}
	if got := fileBytes(t, log); got != before {
		t.Errorf("a reader sees other bytes than the log's")
	}
}

// TestLogRefusedBytesNotCached: a reader has the end of a log mapped
// (shared, read-only: its pages come from the kernel's page cache) while
// a writer's invalid line is refused: the reader never sees the refused
// bytes past the log's end (the kernel's write path used to copy them
// into the cached page the reader maps), nor through read(2).
func TestLogRefusedBytesNotCached(t *testing.T) {
	s := newFuseServer(t)
	script := `
import ctypes, errno, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
path, marker = sys.argv[1], b"REFUSED-BYTES"
w = os.open(path, os.O_WRONLY | os.O_APPEND)
r = os.open(path, os.O_RDONLY)
size = os.fstat(r).st_size
base = libc.mmap(None, 2 * mmap.PAGESIZE + size, mmap.PROT_READ, mmap.MAP_SHARED, r, 0)
assert base not in (None, ctypes.c_void_p(-1).value), errno.errorcode[ctypes.get_errno()]
tail = lambda: ctypes.string_at(base + size, (mmap.PAGESIZE - size % mmap.PAGESIZE) % mmap.PAGESIZE)
tail()  # the last page is cached and mapped
try:
    os.write(w, b'{"role":"user","content":"' + marker + b'"} and garbage\n')
    print("refused line taken")
except OSError as e:
    print("write", errno.errorcode[e.errno])
print("mapped past the end:", "refused bytes" if marker in tail() else "clean")
os.lseek(r, 0, 0)
print("read:", "refused bytes" if marker in os.read(r, size + 4096) else "clean")
`
	logKeptAs1001(t, s, "rc", script, "write EINVAL\nmapped past the end: clean\nread: clean\n")
}
