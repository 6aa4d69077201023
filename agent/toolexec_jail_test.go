package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// useStaticToolBinary sets Enter, for the test, to the real ctxfs binary
// built static (CGO_ENABLED=0, as make build does): the jail binds it as
// the jailed program, and a jail's root/ has no dynamic loader for it.
func useStaticToolBinary(t testing.TB) {
	t.Helper()
	useToolBinary(t) // root, and the directory that is removed at the end
	staticOnce.Do(func() {
		staticBin = filepath.Join(toolBinDir, "ctxfs-static")
		cmd := exec.Command("go", "build", "-o", staticBin, "github.com/ctxfs/ctxfs/cmd/ctxfs")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = err
			t.Logf("go build: %s", out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	Enter = staticBin
}

// jailedToolSpec is a jailed run of uid: root/ holds busybox, an
// /etc/shadow of its own, and /work (the cwd) owned by uid.
func jailedToolSpec(t testing.TB, uid uint32) (Spec, string) {
	t.Helper()
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs /bin/busybox (busybox-static)")
	}
	useStaticToolBinary(t)
	root := filepath.Join(openTempDir(t), "root")
	bin := filepath.Join(root, "bin")
	data, err := os.ReadFile("/bin/busybox")
	testkit.Must(t, err)
	testkit.WriteFile(t, filepath.Join(bin, "busybox"), string(data), 0o755)
	for _, a := range []string{"sh", "cat", "ls", "id", "echo", "sleep", "head", "pwd", "true", "setsid"} {
		testkit.Must(t, os.Symlink("busybox", filepath.Join(bin, a)))
	}
	testkit.WriteFile(t, filepath.Join(root, "etc", "shadow"), "the jail's shadow\n", 0o644)
	for _, d := range append(trampoline.JailDirs("/ctx"), "work") {
		testkit.Must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
		testkit.Must(t, os.Chown(filepath.Join(root, d), int(uid), int(uid)))
	}
	f, err := os.Open(root)
	testkit.Must(t, err)
	t.Cleanup(func() { f.Close() })
	return Spec{RunID: testRunID, Uid: uid, Gid: uid, Dir: filepath.Join(root, "work"),
		Def:  &def.Definition{Kind: abi.KindAgent, Name: "t", Model: "acme/x", Isolation: def.IsolationChroot},
		Env:  map[string]string{"PATH": "/bin", "CTX_RUN_ID": testRunID},
		Jail: &Jail{Root: f, Cwd: "/work", MountRoot: "/ctx", Home: "/ctx/home/u"}}, root
}

// In the jail, the kernel resolves every path inside root/: the host's
// /etc/shadow is out of reach by any path, a symlink, "..", or /proc.
func TestToolJailed(t *testing.T) {
	s, root := jailedToolSpec(t, 1001)
	hostShadow := readString(t, "/etc/shadow")
	testkit.Must(t, os.Symlink("/etc/shadow", filepath.Join(root, "work", "shadow")))

	for _, args := range []string{
		`{"path":"/etc/shadow"}`,
		`{"path":"shadow"}`,
		`{"path":"../../../../../../etc/shadow"}`,
		`{"path":"/proc/self/root/etc/shadow"}`,
	} {
		res, isErr := toolCall(t, s, "fs.read", args, nil)
		if isErr || res["content"] != "the jail's shadow\n" {
			t.Errorf("fs.read %s: %v", args, res)
		}
	}
	// The jail's init is root's: its root is not the uid's to look into,
	// and would be the jail's anyway.
	res, _ := toolCall(t, s, "fs.read", `{"path":"/proc/1/root/etc/shadow"}`, nil)
	if c, _ := res["content"].(string); c == hostShadow || strings.Contains(c, "root:") {
		t.Errorf("/proc/1/root reached the host: %v", res)
	}
	res, isErr := toolCall(t, s, "shell.exec", `{"command":"cat /etc/shadow; id -u; pwd; ls /"}`, nil)
	if out, _ := res["stdout"].(string); isErr || !strings.HasPrefix(out, "the jail's shadow\n1001\n/work\n") || strings.Contains(out, "root:") {
		t.Errorf("shell.exec in the jail: %v", res)
	}

	k := &keeper{}
	res, isErr = toolCall(t, s, "fs.write", `{"path":"new.txt","content":"made in the jail"}`, k.keep)
	if isErr || len(k.got) != 1 || k.got[0].Path != "/work/new.txt" || k.got[0].Existed {
		t.Errorf("fs.write in the jail: %v, kept %+v", res, k.got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "work", "new.txt"), &st); err != nil || st.Uid != 1001 || readString(t, filepath.Join(root, "work", "new.txt")) != "made in the jail" {
		t.Errorf("the file written in the jail: uid %d, %v", st.Uid, err)
	}
	res, isErr = toolCall(t, s, "fs.write", `{"path":"/etc/shadow","content":"x"}`, nil)
	wantToolErrno(t, "fs.write of root's file in the jail", res, isErr, syscall.EACCES)
	res, isErr = toolCall(t, s, "fs.write", `{"path":"/ctx/x","content":"x"}`, nil)
	if !isErr {
		t.Errorf("fs.write in the jail's read-only /ctx: %v", res)
	}
	if readString(t, "/etc/shadow") != hostShadow || readString(t, filepath.Join(root, "etc", "shadow")) != "the jail's shadow\n" {
		t.Error("a shadow changed")
	}
}

// A jailed call of uid 0 runs with no capability: a file only its owner
// may read is out of its reach, as it would not be for root.
func TestToolJailedUid0HasNoPower(t *testing.T) {
	s, root := jailedToolSpec(t, 0)
	ownedFile(t, filepath.Join(root, "work", "private"), "1001's", 0o600, 1001)
	res, isErr := toolCall(t, s, "fs.read", `{"path":"private"}`, nil)
	wantToolErrno(t, "fs.read of another uid's file as jailed uid 0", res, isErr, syscall.EACCES)
	res, isErr = toolCall(t, s, "fs.write", `{"path":"private","content":"x"}`, nil)
	wantToolErrno(t, "fs.write of another uid's file as jailed uid 0", res, isErr, syscall.EACCES)
	if readString(t, filepath.Join(root, "work", "private")) != "1001's" {
		t.Error("the file changed")
	}
}

// A hostile command in the jail is bounded and ends with the call.
func TestToolJailedShellHostile(t *testing.T) {
	const uid = 1078
	s, _ := jailedToolSpec(t, uid)
	requireNoProcesses(t, "before", uid)
	for _, c := range []struct{ what, args string }{
		{"a fork bomb", `{"command":"b(){ b | b & }; b; sleep 60","timeout":3}`},
		{"a process ignoring SIGTERM", `{"command":"trap '' TERM; sleep 300","timeout":1}`},
		{"left in the background", `{"command":"sleep 300 & setsid sleep 300 & echo started"}`},
	} {
		res, isErr := toolCall(t, s, "shell.exec", c.args, nil)
		if isErr {
			t.Errorf("%s: %v", c.what, res)
		}
		requireNoProcesses(t, c.what, uid)
	}
}
