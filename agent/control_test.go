package agent

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/agent/def"
)

// controlClient is a peer of the control socket: it waits for a line on
// stdin (the test has told the socket its pid by then), opens `hold`
// connections that send nothing, then sends each request of argv[3:] on a
// connection of its own ("BIG" is a line over the bound) and prints each
// reply.
const controlClient = `
import socket, sys
path, hold = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()
held = []
for _ in range(hold):
    s = socket.socket(socket.AF_UNIX); s.connect(path); held.append(s)
for req in sys.argv[3:]:
    s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(path)
    data = b"x" * (1 << 20) + b"\n" if req == "BIG" else req.encode() + b"\n"
    try:
        s.sendall(data)
    except OSError:
        pass
    out = b""
    while True:
        d = s.recv(65536)
        if not d: break
        out += d
    sys.stdout.write(out.decode())
`

// runControlClient runs controlClient as a process of its own group (the
// run's tree when tree is set) and returns what it printed.
func runControlClient(t *testing.T, c *control, tree bool, hold string, reqs ...string) string {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", controlClient, c.path, hold}, reqs...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Skip("python3:", err)
	}
	if tree {
		c.started(cmd.Process.Pid)
	}
	in.Write([]byte("go\n"))
	in.Close()
	cmd.Wait()
	return out.String()
}

// TestControlBounds: a request of the run's own process over the bound is
// EMSGSIZE, one not a JSON object or of an unknown op or with a bad call
// id EINVAL, a connection past maxControlConns EAGAIN; a process of the
// same uid outside the run's tree is refused EACCES whatever it sends,
// and nothing is served before the program started.
func TestControlBounds(t *testing.T) {
	c, err := openControl(context.Background(), Spec{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Def: &def.Definition{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	permit := `{"op":"permit","id":"toolu_1","name":"Bash","arguments":{"command":"true"}}`
	if out := runControlClient(t, c, false, "0", permit); !strings.Contains(out, `"code":"EACCES"`) {
		t.Errorf("before the program started: %s", out)
	}
	out := runControlClient(t, c, true, "0", "BIG", "not json", `{"op":"spawn"}`, `{"op":"permit","id":"bad id","name":"Bash","arguments":{}}`, `{"op":"permit","id":"t","name":"Bash","arguments":[1]}`)
	for i, want := range []string{"EMSGSIZE", "EINVAL", "EINVAL", "EINVAL", "EINVAL"} {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || !strings.Contains(lines[i], `"code":"`+want+`"`) {
			t.Fatalf("request %d: want %s, got:\n%s", i, want, out)
		}
	}
	if out := runControlClient(t, c, true, "8", permit); !strings.Contains(out, `"code":"EAGAIN"`) {
		t.Errorf("a connection past %d: %s", maxControlConns, out)
	}
	// This test's own process: the run's uid, not the run's tree.
	c.started(os.Getpid() + 1<<22) // no such process
	if out := runControlClient(t, c, false, "0", permit); !strings.Contains(out, `"code":"EACCES"`) {
		t.Errorf("a process outside the run's tree: %s", out)
	}
}
