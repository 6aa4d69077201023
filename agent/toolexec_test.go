package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/tools"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestMain lets the test binary be the tool process and the enter
// trampoline, as the ctxfs binary is for the server: ExecTool starts it as
// `BINARY __enter DIR BINARY __tool` (useToolBinary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case trampoline.EnterCommand:
			os.Exit(trampoline.EnterMain(os.Args[2:]))
		case ToolCommand:
			os.Exit(tools.Main(os.Args[2:]))
		}
	}
	code := m.Run()
	if toolBinDir != "" {
		os.RemoveAll(toolBinDir)
	}
	os.Exit(code)
}

var (
	toolBinOnce sync.Once
	toolBinDir  string
	toolBin     string
	toolBinErr  error
)

// useToolBinary sets Enter, for the test, to a copy of the test binary
// that other uids may execute (the test binary itself is in a directory
// only root may enter).
func useToolBinary(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: tools run as other uids")
	}
	toolBinOnce.Do(func() {
		if toolBinDir, toolBinErr = os.MkdirTemp("", "ctxfs-tool-bin"); toolBinErr != nil {
			return
		}
		toolBin = filepath.Join(toolBinDir, "ctxfs")
		toolBinErr = copyExecutable(os.Args[0], toolBin)
		if toolBinErr == nil {
			toolBinErr = os.Chmod(toolBinDir, 0o755)
		}
	})
	if toolBinErr != nil {
		t.Fatal(toolBinErr)
	}
	Enter = toolBin
	t.Cleanup(func() { Enter = "" })
}

func copyExecutable(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// toolSpec is a run of uid in a working directory of its own.
func toolSpec(t testing.TB, uid uint32) Spec {
	t.Helper()
	useToolBinary(t)
	dir := openTempDir(t)
	if err := os.Chown(dir, int(uid), int(uid)); err != nil {
		t.Fatal(err)
	}
	return Spec{RunID: testRunID, Uid: uid, Gid: uid, Dir: dir,
		Def: &def.Definition{Kind: abi.KindAgent, Name: "t", Model: "acme/x", Isolation: def.IsolationNone},
		Env: map[string]string{"PATH": "/usr/bin:/bin", "CTX_RUN_ID": testRunID}}
}

// toolCall runs one call with keep recording what it was handed; it
// returns the result decoded, whether it was an error, and what was kept.
func toolCall(t *testing.T, s Spec, name, args string, keep func(FileBefore) error) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if keep == nil {
		keep = func(FileBefore) error { return nil }
	}
	content, isError := ExecTool(ctx, s, ToolCall{ID: "call_1", Name: name, Arguments: args}, keep)
	var out map[string]any
	if err := json.Unmarshal([]byte(content), &out); err != nil {
		t.Fatalf("%s %s: the result is not a JSON object: %q", name, args, content)
	}
	return out, isError
}

// wantToolErrno checks that a call failed with errno.
func wantToolErrno(t *testing.T, what string, res map[string]any, isError bool, errno syscall.Errno) {
	t.Helper()
	if !isError || res["error"] != abi.ErrnoName(errno) {
		t.Errorf("%s: %v (error %v), want %s", what, res, isError, abi.ErrnoName(errno))
	}
}

// ownedFile writes a file owned by uid.
func ownedFile(t testing.TB, p, content string, mode os.FileMode, uid int) {
	t.Helper()
	testkit.WriteFile(t, p, content, mode)
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func argsJSON(kv ...any) string {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestToolReadListStat(t *testing.T) {
	s := toolSpec(t, 1001)
	ownedFile(t, filepath.Join(s.Dir, "a.txt"), "hello tools", 0o644, 1001)
	big := strings.Repeat("x", tools.MaxOutput+10)
	ownedFile(t, filepath.Join(s.Dir, "big"), big, 0o644, 1001)
	if err := unix.Mkfifo(filepath.Join(s.Dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}

	res, isErr := toolCall(t, s, "fs.read", `{"path":"a.txt"}`, nil)
	if isErr || res["content"] != "hello tools" || res["truncated"] != false || res["size"] != 11.0 {
		t.Errorf("fs.read: %v", res)
	}
	res, _ = toolCall(t, s, "fs.read", `{"path":"a.txt","offset":6,"limit":3}`, nil)
	if res["content"] != "too" || res["truncated"] != true {
		t.Errorf("fs.read offset/limit: %v", res)
	}
	res, _ = toolCall(t, s, "fs.read", `{"path":"big"}`, nil)
	if c, _ := res["content"].(string); len(c) != tools.MaxOutput || res["truncated"] != true {
		t.Errorf("fs.read of a big file: %d bytes, truncated %v", len(c), res["truncated"])
	}
	res, isErr = toolCall(t, s, "fs.read", `{"path":"."}`, nil)
	wantToolErrno(t, "fs.read of a directory", res, isErr, syscall.EISDIR)
	res, isErr = toolCall(t, s, "fs.read", `{"path":"fifo"}`, nil) // must not hang on the FIFO
	wantToolErrno(t, "fs.read of a FIFO", res, isErr, syscall.EINVAL)
	res, isErr = toolCall(t, s, "fs.read", `{"path":"missing"}`, nil)
	wantToolErrno(t, "fs.read of nothing", res, isErr, syscall.ENOENT)

	res, isErr = toolCall(t, s, "fs.list", `{"path":"."}`, nil)
	if ents, _ := res["entries"].([]any); isErr || len(ents) != 3 {
		t.Errorf("fs.list: %v", res)
	}
	many := filepath.Join(s.Dir, "many")
	testkit.Must(t, os.Mkdir(many, 0o755))
	for i := 0; i <= tools.MaxEntries; i++ {
		testkit.Must(t, os.WriteFile(filepath.Join(many, strconv.Itoa(i)), nil, 0o644))
	}
	res, _ = toolCall(t, s, "fs.list", `{"path":"many"}`, nil)
	if ents, _ := res["entries"].([]any); len(ents) != tools.MaxEntries || res["truncated"] != true {
		t.Errorf("fs.list of %d entries: %d listed, truncated %v", tools.MaxEntries+1, len(ents), res["truncated"])
	}
	res, isErr = toolCall(t, s, "fs.stat", `{"path":"a.txt"}`, nil)
	if isErr || res["type"] != "file" || res["size"] != 11.0 || res["mode"] != "0644" || res["uid"] != 1001.0 {
		t.Errorf("fs.stat: %v", res)
	}
}

func TestToolRunsAsTheUid(t *testing.T) {
	s := toolSpec(t, 1001)
	res, isErr := toolCall(t, s, "shell.exec", `{"command":"id -u; id -g; id -G; pwd; echo err >&2; exit 3"}`, nil)
	if isErr || res["stdout"] != "1001\n1001\n1001\n"+s.Dir+"\n" || res["stderr"] != "err\n" || res["exit_status"] != 3.0 {
		t.Errorf("shell.exec: %v", res)
	}
	res, isErr = toolCall(t, s, "shell.exec", `{"argv":["sh","-c","echo \"$CTX_RUN_ID\""]}`, nil)
	if isErr || res["stdout"] != testRunID+"\n" {
		t.Errorf("shell.exec argv with the run's environment: %v", res)
	}
	res, isErr = toolCall(t, s, "shell.exec", `{"argv":["/nonexistent/prog"]}`, nil)
	wantToolErrno(t, "shell.exec of nothing", res, isErr, syscall.ENOENT)

	// Outside a jail, uid 0 would be root: refused before anything runs.
	root := toolSpec(t, 0)
	res, isErr = toolCall(t, root, "fs.write", `{"path":"x","content":"x"}`, nil)
	wantToolErrno(t, "a call as root", res, isErr, syscall.EPERM)
	if _, err := os.Lstat(filepath.Join(root.Dir, "x")); !os.IsNotExist(err) {
		t.Errorf("a refused call as root wrote: %v", err)
	}
}

// keeper records what keep was handed, and returns err.
type keeper struct {
	got []FileBefore
	err error
}

func (k *keeper) keep(b FileBefore) error { k.got = append(k.got, b); return k.err }

func TestToolChangesKeepFirst(t *testing.T) {
	s := toolSpec(t, 1001)
	p := filepath.Join(s.Dir, "f.txt")

	k := &keeper{}
	res, isErr := toolCall(t, s, "fs.write", `{"path":"f.txt","content":"one two two"}`, k.keep)
	if isErr || res["action"] != "create" || len(k.got) != 1 || k.got[0].Existed || k.got[0].Path != p {
		t.Fatalf("fs.write of a new file: %v, kept %+v", res, k.got)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Uid != 1001 || readString(t, p) != "one two two" {
		t.Fatalf("the new file: uid %d, %v", st.Uid, err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}

	k = &keeper{}
	res, isErr = toolCall(t, s, "fs.replace", `{"path":"f.txt","old":"two","new":"2","count":2}`, k.keep)
	if isErr || res["replaced"] != 2.0 || len(k.got) != 1 || !k.got[0].Existed || string(k.got[0].Content) != "one two two" {
		t.Fatalf("fs.replace: %v, kept %+v", res, k.got)
	}
	if got := readString(t, p); got != "one 2 2" {
		t.Errorf("after fs.replace: %q", got)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("fs.replace changed the mode to %v", fi.Mode())
	}

	// Refused before anything is kept: old not there, or there too often.
	for _, args := range []string{`{"path":"f.txt","old":"three","new":"3"}`, `{"path":"f.txt","old":"2","new":"3"}`} {
		k = &keeper{}
		res, isErr = toolCall(t, s, "fs.replace", args, k.keep)
		wantToolErrno(t, "fs.replace "+args, res, isErr, syscall.EINVAL)
		if len(k.got) != 0 || readString(t, p) != "one 2 2" {
			t.Errorf("a refused replace kept %+v or changed the file to %q", k.got, readString(t, p))
		}
	}

	// keep refuses (the versions are full): nothing changes.
	k = &keeper{err: abi.Errorf(syscall.EDQUOT, "keep", "the session's versions are full")}
	res, isErr = toolCall(t, s, "fs.write", `{"path":"f.txt","content":"lost"}`, k.keep)
	wantToolErrno(t, "fs.write refused by keep", res, isErr, syscall.EDQUOT)
	res, isErr = toolCall(t, s, "fs.write", `{"path":"new.txt","content":"lost"}`, k.keep)
	wantToolErrno(t, "a new file refused by keep", res, isErr, syscall.EDQUOT)
	if readString(t, p) != "one 2 2" {
		t.Errorf("a change keep refused was made: %q", readString(t, p))
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("a creation keep refused was made: %v", err)
	}
	assertNoTemp(t, s.Dir)

	// fs.remove, the restore's own: keeps the content, then removes.
	k = &keeper{}
	res, isErr = toolCall(t, s, "fs.remove", `{"path":"f.txt"}`, k.keep)
	if isErr || res["action"] != "delete" || len(k.got) != 1 || string(k.got[0].Content) != "one 2 2" {
		t.Errorf("fs.remove: %v, kept %+v", res, k.got)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("fs.remove left the file: %v", err)
	}
}

// A file larger than a version may hold is refused (EFBIG), unchanged.
func TestToolChangeOfAHugeFile(t *testing.T) {
	s := toolSpec(t, 1001)
	p := filepath.Join(s.Dir, "huge")
	ownedFile(t, p, "", 0o644, 1001)
	if err := os.Truncate(p, tools.MaxBefore+1); err != nil {
		t.Fatal(err)
	}
	k := &keeper{}
	res, isErr := toolCall(t, s, "fs.write", `{"path":"huge","content":"small"}`, k.keep)
	wantToolErrno(t, "fs.write of a huge file", res, isErr, syscall.EFBIG)
	if fi, _ := os.Stat(p); len(k.got) != 0 || fi.Size() != tools.MaxBefore+1 {
		t.Errorf("kept %d, size now %d", len(k.got), fi.Size())
	}
}

// assertNoTemp checks that no temporary file of a change was left.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".ctxfs-tool-") {
			t.Errorf("temporary file %s left", e.Name())
		}
	}
}

// The uid's own permissions, enforced by the kernel, keep a call in:
// every one of these would read or change the host's or another user's
// file if the tool process ran as root (as the server does), and each is
// refused because it runs as the run's uid.
func TestToolConfinementWithoutJail(t *testing.T) {
	s := toolSpec(t, 1001)
	other := openTempDir(t) // uid 1002's
	secret := filepath.Join(other, "secret")
	ownedFile(t, secret, "1002's secret", 0o600, 1002)
	public := filepath.Join(other, "public")
	ownedFile(t, public, "1002's file", 0o644, 1002)
	if err := os.Chown(other, 1002, 1002); err != nil {
		t.Fatal(err)
	}
	shadow := readString(t, "/etc/shadow")
	for _, link := range [][2]string{{"/etc/shadow", "shadow"}, {secret, "secret"}} {
		if err := os.Symlink(link[0], filepath.Join(s.Dir, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	// A hardlink to 1002's file in 1001's directory (made by root: the
	// kernel's protected_hardlinks would stop 1001 itself).
	if err := os.Link(public, filepath.Join(s.Dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", strings.Count(s.Dir, "/"))

	for _, c := range []struct{ name, args string }{
		{"fs.read", `{"path":"shadow"}`},
		{"fs.read", `{"path":"` + up + `etc/shadow"}`},
		{"fs.read", `{"path":"/proc/self/root/etc/shadow"}`},
		{"fs.read", `{"path":"/proc/1/root/etc/shadow"}`},
		{"fs.read", `{"path":"secret"}`},
		{"fs.read", `{"path":"` + up + strings.TrimPrefix(secret, "/") + `"}`},
		{"fs.list", `{"path":"/proc/1/root/root"}`},
		{"fs.write", `{"path":"hardlink","content":"changed"}`},
		{"fs.replace", `{"path":"hardlink","old":"file","new":"FILE"}`},
		{"fs.write", `{"path":"` + up + `etc/ctxfs-tool-test","content":"x"}`},
		{"fs.write", `{"path":"/proc/1/root/etc/ctxfs-tool-test","content":"x"}`},
		{"fs.remove", `{"path":"` + up + strings.TrimPrefix(public, "/") + `"}`},
		{"shell.exec", `{"argv":["cat","/etc/shadow"]}`},
	} {
		k := &keeper{}
		res, isErr := toolCall(t, s, c.name, c.args, k.keep)
		if c.name == "shell.exec" {
			if res["exit_status"] == 0.0 || strings.Contains(res["stdout"].(string), "root:") {
				t.Errorf("%s %s read the host's shadow: %v", c.name, c.args, res)
			}
			continue
		}
		wantToolErrno(t, c.name+" "+c.args, res, isErr, syscall.EACCES)
		if len(k.got) != 0 {
			t.Errorf("%s %s kept %+v", c.name, c.args, k.got)
		}
	}
	if readString(t, public) != "1002's file" || readString(t, secret) != "1002's secret" || readString(t, "/etc/shadow") != shadow {
		t.Error("another user's or the host's file changed")
	}
	for _, p := range []string{"/etc/ctxfs-tool-test"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			os.Remove(p)
			t.Errorf("%s was created", p)
		}
	}
	// A final symlink is not written through (ELOOP), even to the uid's own file.
	ownedFile(t, filepath.Join(s.Dir, "mine"), "mine", 0o644, 1001)
	if err := os.Symlink("mine", filepath.Join(s.Dir, "tomine")); err != nil {
		t.Fatal(err)
	}
	res, isErr := toolCall(t, s, "fs.write", `{"path":"tomine","content":"x"}`, nil)
	wantToolErrno(t, "fs.write through a final symlink", res, isErr, syscall.ELOOP)
	if readString(t, filepath.Join(s.Dir, "mine")) != "mine" {
		t.Error("a write went through a final symlink")
	}
}

// A symlink swapped in for the file between the read of its earlier
// content and the write (here while keep runs) is not written through,
// and neither is a directory swapped for a symlink: the change goes
// through the directory and the file it opened, and is refused (EAGAIN)
// when the name no longer holds the file it kept.
func TestToolChangeRace(t *testing.T) {
	s := toolSpec(t, 1001)
	victimDir := openTempDir(t)
	victim := filepath.Join(victimDir, "victim")
	ownedFile(t, victim, "victim", 0o666, 1002)
	if err := os.Chmod(victimDir, 0o777); err != nil { // even where 1001 may write
		t.Fatal(err)
	}
	p := filepath.Join(s.Dir, "f")
	ownedFile(t, p, "before", 0o644, 1001)

	swapFile := func(FileBefore) error { // as the uid's other process would
		os.Remove(p)
		return os.Symlink(victim, p)
	}
	res, isErr := toolCall(t, s, "fs.write", `{"path":"f","content":"after"}`, swapFile)
	wantToolErrno(t, "fs.write with the file swapped for a symlink", res, isErr, syscall.EAGAIN)
	if readString(t, victim) != "victim" {
		t.Errorf("the write went through the swapped symlink: %q", readString(t, victim))
	}
	if target, err := os.Readlink(p); err != nil || target != victim {
		t.Errorf("the swapped-in symlink was replaced: %q, %v", target, err)
	}
	assertNoTemp(t, s.Dir)

	// A file created meanwhile is not replaced by a creation; a file
	// swapped in for one being removed is not removed.
	created := func(FileBefore) error { return os.WriteFile(filepath.Join(s.Dir, "late"), []byte("theirs"), 0o644) }
	res, isErr = toolCall(t, s, "fs.write", `{"path":"late","content":"mine"}`, created)
	wantToolErrno(t, "fs.write of a file created meanwhile", res, isErr, syscall.EAGAIN)
	if got := readString(t, filepath.Join(s.Dir, "late")); got != "theirs" {
		t.Errorf("a file created meanwhile was replaced: %q", got)
	}
	swapped := func(FileBefore) error {
		return os.Rename(filepath.Join(s.Dir, "late"), filepath.Join(s.Dir, "gone"))
	}
	ownedFile(t, filepath.Join(s.Dir, "gone"), "kept", 0o644, 1001)
	res, isErr = toolCall(t, s, "fs.remove", `{"path":"gone"}`, swapped)
	wantToolErrno(t, "fs.remove of a file swapped meanwhile", res, isErr, syscall.EAGAIN)
	if got := readString(t, filepath.Join(s.Dir, "gone")); got != "theirs" {
		t.Errorf("a file swapped in meanwhile was removed: %q", got)
	}
	assertNoTemp(t, s.Dir)

	// The directory swapped for a symlink to the victim's: the change
	// lands in the directory it opened, now under its new name.
	sub := filepath.Join(s.Dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil || os.Chown(sub, 1001, 1001) != nil {
		t.Fatal(err)
	}
	ownedFile(t, filepath.Join(sub, "victim"), "mine", 0o644, 1001)
	swapDir := func(FileBefore) error {
		if err := os.Rename(sub, sub+".moved"); err != nil {
			return err
		}
		return os.Symlink(victimDir, sub)
	}
	res, isErr = toolCall(t, s, "fs.write", `{"path":"sub/victim","content":"after"}`, swapDir)
	if isErr || readString(t, victim) != "victim" || readString(t, filepath.Join(sub+".moved", "victim")) != "after" {
		t.Errorf("with the directory swapped: %v; victim %q", res, readString(t, victim))
	}
}

// uidProcesses lists the processes of uid still running (zombies left for
// the host's init do not count).
func uidProcesses(uid uint32) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		var st unix.Stat_t
		if err != nil || unix.Stat("/proc/"+e.Name(), &st) != nil || st.Uid != uid || gone(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// requireNoProcesses checks that uid has no process left, and kills any
// left so that the next test starts clean.
func requireNoProcesses(t *testing.T, what string, uid uint32) {
	t.Helper()
	left := uidProcesses(uid)
	for _, pid := range left {
		unix.Kill(pid, unix.SIGKILL)
	}
	if len(left) > 0 {
		t.Errorf("%s: %d processes of uid %d were left", what, len(left), uid)
	}
}

// Hostile commands are bounded and leave nothing behind. A uid of their
// own: a fork bomb's RLIMIT_NPROC counts every task of the uid, and the
// check for leftovers counts them all.
func TestToolShellHostile(t *testing.T) {
	const uid = 1077
	s := toolSpec(t, uid)
	requireNoProcesses(t, "before", uid)
	for _, c := range []struct{ what, args string }{
		{"a fork bomb", `{"command":"b(){ b | b & }; b; sleep 60","timeout":3}`},
		{"a process ignoring SIGTERM", `{"command":"trap '' TERM; sleep 300","timeout":1}`},
		{"left in the background", `{"command":"sleep 300 & setsid sleep 300 & (setsid sh -c 'sleep 300 &' &); echo started"}`},
	} {
		res, isErr := toolCall(t, s, "shell.exec", c.args, nil)
		if isErr {
			t.Errorf("%s: %v", c.what, res)
		}
		requireNoProcesses(t, c.what, uid)
	}

	res, isErr := toolCall(t, s, "shell.exec", `{"command":"head -c 100000000 /dev/zero; head -c 100000000 /dev/zero >&2"}`, nil)
	if out, _ := res["stdout"].(string); isErr || len(out) != tools.MaxOutput || len(res["stderr"].(string)) != tools.MaxOutput || res["truncated"] != true || res["exit_status"] != 0.0 {
		t.Errorf("100 MB of output: %d bytes kept, %v", len(out), res["truncated"])
	}
	res, _ = toolCall(t, s, "shell.exec", `{"command":"trap '' TERM; sleep 300","timeout":1}`, nil)
	if res["timed_out"] != true || res["signal"] != "SIGKILL" {
		t.Errorf("a timed-out command: %v", res)
	}

	// The run is cancelled while the command runs.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(500 * time.Millisecond); cancel() }()
	done := make(chan struct{})
	go func() {
		ExecTool(ctx, s, ToolCall{ID: "c", Name: "shell.exec", Arguments: `{"command":"trap '' TERM; sleep 300 & sleep 300"}`}, nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled call did not return")
	}
	requireNoProcesses(t, "a cancelled call", uid)
}

// Whatever a model sends as arguments is an error result, never a crash,
// and nothing runs.
func TestToolHostileArguments(t *testing.T) {
	s := toolSpec(t, 1001)
	for _, c := range []struct{ name, args string }{
		{"fs.read", ``},
		{"fs.read", `null`},
		{"fs.read", `[]`},
		{"fs.read", `"a"`},
		{"fs.read", `{}`},
		{"fs.read", `{"path":1}`},
		{"fs.read", `{"path":"a","extra":1}`},
		{"fs.read", `{"path":"a\u0000b"}`},
		{"fs.read", `{"path":""}`},
		{"fs.read", `{"path":"` + strings.Repeat("a", 5000) + `"}`},
		{"fs.read", `{"path":"a","offset":-1}`},
		{"fs.read", `{"path":"a","limit":0}`},
		{"fs.read", `{"path":"a","limit":1e99}`},
		{"fs.read", `{"path":"a"} {"path":"b"}`},
		{"fs.read", "{\"path\":\"\xff\"}"},
		{"fs.write", `{"path":"a"}`},
		{"fs.write", `{"path":"a","content":"` + strings.Repeat("a", tools.MaxWrite+1) + `"}`},
		{"fs.replace", `{"path":"a","old":"","new":"b"}`},
		{"fs.replace", `{"path":"a","old":"x","new":"b","count":0}`},
		{"shell.exec", `{}`},
		{"shell.exec", `{"argv":["a"],"command":"a"}`},
		{"shell.exec", `{"argv":[]}`},
		{"shell.exec", `{"argv":[""]}`},
		{"shell.exec", `{"argv":["a\u0000"]}`},
		{"shell.exec", `{"argv":"true"}`},
		{"shell.exec", `{"command":"true","timeout":601}`},
		{"shell.exec", `{"command":"true","timeout":0}`},
		{"shell.exec", `{"command":"true","timeout":"30"}`},
		{"ask_user", `{"text":"?"}`}, // a person answers it, ExecTool does not
		{"fs.delete", `{"path":"a"}`},
		{"", `{}`},
	} {
		res, isErr := toolCall(t, s, c.name, c.args, nil)
		wantToolErrno(t, c.name+" "+c.args, res, isErr, syscall.EINVAL)
	}
	if ents, _ := os.ReadDir(s.Dir); len(ents) != 0 {
		t.Errorf("hostile arguments left %d files", len(ents))
	}
}

// What a tool process reports of a file is bounded before keep sees it:
// the process runs as the uid, which could make it say anything.
func TestToolCheckBefore(t *testing.T) {
	for _, c := range []struct {
		b  tools.Before
		ok bool
	}{
		{tools.Before{Path: "/work/f", Existed: true, Content: []byte("x")}, true},
		{tools.Before{Path: "/work/f"}, true},
		{tools.Before{Path: "/work/f", Content: []byte("x")}, false},
		{tools.Before{Path: "/work/f", Existed: true, Content: make([]byte, tools.MaxBefore+1)}, false},
		{tools.Before{Path: "work/f"}, false},
		{tools.Before{Path: "/work/../f"}, false},
		{tools.Before{Path: "/work/f\x00"}, false},
		{tools.Before{Path: ""}, false},
	} {
		if err := checkBefore(&c.b); (err == nil) != c.ok {
			t.Errorf("checkBefore(%q, %v, %d bytes) = %v", c.b.Path, c.b.Existed, len(c.b.Content), err)
		}
	}
}

func TestToolCancelledBeforeStart(t *testing.T) {
	s := toolSpec(t, 1001)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	content, isErr := ExecTool(ctx, s, ToolCall{ID: "c", Name: "fs.write", Arguments: `{"path":"f","content":"x"}`}, (&keeper{}).keep)
	if !isErr || !strings.Contains(content, "ECANCELED") {
		t.Errorf("a call of a stopped run: %s", content)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir, "f")); !os.IsNotExist(err) {
		t.Errorf("a call of a stopped run wrote: %v", err)
	}
}

// A restore writes back bytes that are not text (content_base64), and they
// arrive exactly: the line to the tool process carries bytes as base64.
func TestToolWriteBytesExactly(t *testing.T) {
	s := toolSpec(t, 1001)
	want := []byte{0, 0xff, 0xfe, '\n', 0xc3, 0x28, 'a', 0}
	args := argsJSON("path", "bin", "content_base64", base64.StdEncoding.EncodeToString(want))
	res, isErr := toolCall(t, s, "fs.write", args, nil)
	if got := readString(t, filepath.Join(s.Dir, "bin")); isErr || got != string(want) {
		t.Errorf("fs.write content_base64: %v, file %q", res, got)
	}
	k := &keeper{}
	toolCall(t, s, "fs.write", `{"path":"bin","content":"text"}`, k.keep)
	if len(k.got) != 1 || string(k.got[0].Content) != string(want) {
		t.Errorf("the kept bytes: %+v", k.got)
	}
	res, isErr = toolCall(t, s, "fs.write", `{"path":"bin","content":"x","content_base64":"eA=="}`, nil)
	wantToolErrno(t, "content and content_base64", res, isErr, syscall.EINVAL)
}

// The path a version keeps is the file the change made, so that a
// restore (the kept content written back at the kept path, as
// runRestore does) puts that file back: "work/link/../secret", with
// link a symlink to real/sub, is real/secret as the kernel resolves it,
// not work/secret as the text cleans (which the restore then made, and
// real/secret stayed changed).
func TestKeptPathIsTheFileChanged(t *testing.T) {
	s := toolSpec(t, 1001)
	dir, err := filepath.EvalSymlinks(s.Dir)
	testkit.Must(t, err)
	for _, d := range []string{"real", "real/sub", "work"} {
		testkit.Must(t, os.Mkdir(filepath.Join(dir, d), 0o755))
		testkit.Must(t, os.Chown(filepath.Join(dir, d), 1001, 1001))
	}
	testkit.Must(t, os.Symlink("../real/sub", filepath.Join(dir, "work/link")))
	ownedFile(t, filepath.Join(dir, "real/secret"), "original", 0o644, 1001)
	k := &keeper{}
	if res, isErr := toolCall(t, s, "fs.write", `{"path":"work/link/../secret","content":"changed"}`, k.keep); isErr || len(k.got) != 1 {
		t.Fatalf("fs.write: %v, kept %v", res, k.got)
	}
	if b := k.got[0]; b.Path != filepath.Join(dir, "real/secret") || !b.Existed || string(b.Content) != "original" {
		t.Fatalf("kept %s (existed %v, %q), want %s as it was", b.Path, b.Existed, b.Content, filepath.Join(dir, "real/secret"))
	}
	b := k.got[0]
	toolCall(t, s, "fs.write", argsJSON("path", b.Path, "content_base64", base64.StdEncoding.EncodeToString(b.Content)), nil)
	if got := readString(t, filepath.Join(dir, "real/secret")); got != "original" {
		t.Errorf("after the restore real/secret holds %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "work/secret")); err == nil {
		t.Error("the restore made work/secret")
	}
}
