package integration

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestCtlRequestOverBound: a request over 1 MiB written to a ctl file is
// refused EMSGSIZE at the writer's write (SPEC 7, 15), in the shell form
// too. The kernel hands one write(2) to the server in pieces, so the
// piece past the bound is refused after earlier pieces were taken: the
// write returns short, and the writer writes the rest again; that rest
// must be refused for the request's size, not as a second request
// (EINVAL). One EMSGSIZE frame follows, then end of file; nothing is
// written.
func TestCtlRequestOverBound(t *testing.T) {
	s := newFuseServer(t)
	s.send("c", "c0", "hi")
	ctl := s.mnt(sessRel("c")) + "/ctl"
	time.Sleep(1200 * time.Millisecond) // the index snapshot settles
	before := storeSnapshot(t, s)

	out, err := bashAs(t, nil, `exec 3<>`+ctl+`; req="{\"op\":\"send\",\"id\":\"big\",\"input\":\"$(head -c 1100000 /dev/zero | tr '\0' a)\"}"; printf '%s\n' "$req" >&3; echo "write=$?"; cat <&3`)
	if err != nil || !strings.Contains(out, "Message too long") || !strings.Contains(out, "write=1") ||
		strings.Count(out, `"type":"error"`) != 1 || !strings.Contains(out, `"code":"EMSGSIZE"`) {
		t.Errorf("a request over 1 MiB from bash: %v %q", err, lastLines(out, 5))
	}

	f, err := os.OpenFile(ctl, os.O_RDWR, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"send","id":"big2","input":"` + strings.Repeat("a", 1<<20) + `"}` + "\n")
	testkit.WantErrno(t, "a request over 1 MiB from Go (its Write writes the rest again)", err, syscall.EMSGSIZE)
	got := readFrames(t, f)
	f.Close()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, `"code":"EMSGSIZE"`) {
		t.Errorf("frames after the refusal %q, want one EMSGSIZE error frame and EOF", got)
	}
	testkit.Same(t, "requests over the bound", before, storeSnapshot(t, s))
}

// ctlAs writes req to the ctl file as c (python3: one open, one write,
// read to the end) and returns "write=OK" or "write=ERRNO", then the
// frames.
func ctlAs(t *testing.T, c *cred, ctl, req string) string {
	t.Helper()
	py := `
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    os.write(fd, sys.argv[2].encode() + b"\n")
    print("write=OK")
except OSError as e:
    print("write=" + errno.errorcode[e.errno])
while True:
    b = os.read(fd, 65536)
    if not b:
        break
    sys.stdout.write(b.decode())
`
	out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", py, ctl, req)
	if err != nil {
		t.Fatalf("ctl %s as %s: %v\n%s", req, credName(c), err, out)
	}
	return out
}

// TestCtlSharedRequestNamesItsPlace: a request written to a shared
// session's ctl may name the session's scope without its space, or its
// space without its scope: both name this session (SPEC 7: if present
// they must name this session and its scope). Until 2026-12-06 both were
// EINVAL ("scope shared needs a space", "space goes only with scope
// shared"), as on a socket, where nothing else says the space. A scope
// or space that is not the session's is still EINVAL, and writes nothing.
func TestCtlSharedRequestNamesItsPlace(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	s.spaceAdd("other", 1234)
	bob := member(1002, 1234)
	if _, raw, err := s.requestAs(bob, "coder", `{"op":"send","id":"s0","session":"plan","scope":"shared","space":"team","input":"first"}`); err != nil {
		t.Fatalf("first send: %v %s", err, raw)
	}
	s.send("mine", "m0", "hi")
	ctl := s.mnt("shared/team/agent/coder/session/plan/ctl")
	for _, req := range []string{
		`{"op":"send","id":"s1","input":"names nothing"}`,
		`{"op":"send","id":"s2","scope":"shared","input":"names its scope"}`,
		`{"op":"send","id":"s3","space":"team","input":"names its space"}`,
		`{"op":"send","id":"s4","session":"plan","scope":"shared","space":"team","input":"names all"}`,
	} {
		out := ctlAs(t, bob, ctl, req)
		if !strings.HasPrefix(out, "write=OK\n") || !strings.Contains(out, `"type":"start"`) || !strings.Contains(out, `"status":"ok"`) {
			t.Errorf("%s to a shared session's ctl: %q", req, out)
		}
	}
	if st := ctlAs(t, bob, ctl, `{"op":"status","scope":"shared"}`); !strings.Contains(st, `"type":"status","session":"plan"`) {
		t.Errorf("status naming its scope: %q", st)
	}

	time.Sleep(1200 * time.Millisecond) // the index snapshot settles
	before := storeSnapshot(t, s)
	for _, req := range []string{
		`{"op":"send","id":"x1","scope":"private","input":"another scope"}`,
		`{"op":"send","id":"x2","scope":"temp","input":"another scope"}`,
		`{"op":"send","id":"x3","space":"other","input":"another space"}`,
		`{"op":"send","id":"x4","scope":"shared","space":"other","input":"another space"}`,
		`{"op":"send","id":"x5","scope":"shared","space":"bad name","input":"a bad space"}`,
	} {
		if out := ctlAs(t, bob, ctl, req); !strings.HasPrefix(out, "write=EINVAL\n") || strings.Count(out, `"code":"EINVAL"`) != 1 {
			t.Errorf("%s to a shared session's ctl: %q, want EINVAL", req, out)
		}
	}
	private := s.mnt(sessRel("mine")) + "/ctl"
	for _, req := range []string{
		`{"op":"send","id":"y1","scope":"shared","input":"not this scope"}`,
		`{"op":"send","id":"y2","space":"team","input":"not in a space"}`,
	} {
		if out := ctlAs(t, nil, private, req); !strings.HasPrefix(out, "write=EINVAL\n") || strings.Count(out, `"code":"EINVAL"`) != 1 {
			t.Errorf("%s to a private session's ctl: %q, want EINVAL", req, out)
		}
	}
	testkit.Same(t, "refused requests", before, storeSnapshot(t, s))
}

// TestCtlClosedEarlyRunGoesOn: closing a ctl file after the start frame
// of its send does not stop the run (SPEC 7): it records its frames and
// its done as if the reply were read to the end.
func TestCtlClosedEarlyRunGoesOn(t *testing.T) {
	release := t.TempDir()
	s := newFuseServerWith(t, func(s *server) {
		s.define("stepper", map[string]string{"program": strings.ReplaceAll(stepperProgram, "RELEASE", release)})
	})
	dir := s.mnt("home/0/agent/stepper/session/early")
	testkit.Must(t, os.MkdirAll(dir, 0o700))
	f, err := os.OpenFile(dir+"/ctl", os.O_RDWR, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"send","id":"e1","input":"go on"}` + "\n")
	testkit.Must(t, err)
	first := make([]byte, 64)
	n, err := f.Read(first)
	testkit.Must(t, err)
	if !strings.HasPrefix(string(first[:n]), `{"type":"start"`) {
		t.Fatalf("first bytes of the reply %q", first[:n])
	}
	testkit.Must(t, f.Close())
	releaseRun(t, release, "early")
	eventually(t, 10*time.Second, "the run ends done after its ctl was closed", func() bool {
		return s.readMnt("home/0/agent/stepper/session/early/state") == "done\n"
	})
	events := s.readMnt("home/0/agent/stepper/session/early/events.jsonl")
	if !strings.Contains(events, `"tool_result"`) || !strings.Contains(events, `"status":"ok"`) {
		t.Errorf("events of the run whose ctl was closed early:\n%s", events)
	}
	if got := s.readMnt("home/0/agent/stepper/session/early/latest.md"); got != "second\n" {
		t.Errorf("latest.md = %q, want the run's last message", got)
	}
}

// TestCtlSharedRequestNamesItsPlaceOnFollower: the same requests written
// to a shared session's ctl on a cluster follower, relayed to the writer
// (server.ServeRemoteControl), are taken as on the writer's own mount.
func TestCtlSharedRequestNamesItsPlaceOnFollower(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.spaceAdd("team", 1234)
	bob := member(1002, 1234)
	if _, raw, err := w.srv.requestAs(bob, "coder", `{"op":"send","id":"s0","session":"plan","scope":"shared","space":"team","input":"first"}`); err != nil {
		t.Fatalf("first send: %v %s", err, raw)
	}
	ctl := f.srv.mnt("shared/team/agent/coder/session/plan/ctl")
	for _, req := range []string{
		`{"op":"send","id":"f1","scope":"shared","input":"names its scope"}`,
		`{"op":"send","id":"f2","space":"team","input":"names its space"}`,
	} {
		out := ctlAs(t, bob, ctl, req)
		if !strings.HasPrefix(out, "write=OK\n") || !strings.Contains(out, `"type":"start"`) || !strings.Contains(out, `"status":"ok"`) {
			t.Errorf("%s to a shared session's ctl on the follower: %q", req, out)
		}
	}
	if out := ctlAs(t, bob, ctl, `{"op":"status","space":"other"}`); !strings.HasPrefix(out, "write=EINVAL\n") {
		t.Errorf("another space on the follower: %q, want EINVAL", out)
	}
}
