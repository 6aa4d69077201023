package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/cluster/ca"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestClusterCtlOnFollower: a request written to a session's ctl file on
// a follower host's mount is relayed to the writer host and made there
// (SPEC 19: every host serves the whole tree to its local users), with its
// frames read back through the same file: a send through the follower's
// ctl is recorded once, its frames from start to done; `echo … > ctl`
// (a truncating open) works as on the writer; a request the writer
// refuses fails the write with its errno and leaves one error frame, and
// writes nothing. The writer checks the caller again (it vouches only for
// the uid): a relayed request of another uid for 1001's session is
// EACCES, one for a session that does not exist ENOENT, both writing
// nothing; a hello naming a session outside its target is EINVAL.
func TestClusterCtlOnFollower(t *testing.T) {
	c := newTestCluster(t, 2*time.Second, nil, "a", "b")
	w := c.waitWriter("", 20*time.Second)
	f := c.follower(w)
	w.srv.sendAs(uid1001, "k", "k0", "", "first")
	ctl := f.srv.mnt(uid1001CoderAt + "k/ctl")
	msgs := w.srv.mnt(uid1001CoderAt + "k/messages.jsonl")

	out, err := bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"k1","input":"through the follower"}' >&3; cat <&3`)
	if err != nil {
		t.Fatalf("a send through the follower's ctl: %v %s", err, out)
	}
	checkSendFrames(t, "the follower's ctl", out)
	out, err = bashAs(t, uid1001, `printf '%s\n' '{"op":"send","id":"k2","input":"echoed into ctl"}' > `+ctl)
	if err != nil {
		t.Fatalf("echo > ctl on the follower: %v %s", err, out)
	}
	got := fileBytes(t, msgs)
	for _, input := range []string{"through the follower", "echoed into ctl"} {
		if n := strings.Count(got, `"content":"`+input+`"`); n != 1 { // the user's line; the echo's is a text part
			t.Errorf("%q is sent in the writer's messages.jsonl %d times, want once:\n%s", input, n, got)
		}
	}

	time.Sleep(1200 * time.Millisecond) // the writer's values written behind settle
	before := hostSnapshot(t, c.store)
	out, err = bashAs(t, uid1001, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"k3","session":"other","input":"x"}' >&3; echo "write=$?"; cat <&3`)
	if err != nil || !strings.Contains(out, "Invalid argument") || !strings.Contains(out, "write=1") || strings.Count(out, `"code":"EINVAL"`) != 1 {
		t.Errorf("a request for another session through the follower's ctl: %v %q, want the write EINVAL and one error frame", err, out)
	}

	// The writer's own check, with a hello as host f would send it.
	id, err := ca.Load(f.certs)
	testkit.Must(t, err)
	relayed := func(uid uint32, session, line string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := peer.Hello{Uid: uid, Gid: uid, Kind: "agent", Owner: "coder", Session: session}
		conn, err := peer.Dial(ctx, w.peerAddr(), id, h)
		if err != nil {
			return err
		}
		r, err := peer.Control(conn, []byte(line))
		if err == nil {
			r.Close()
		}
		return err
	}
	send := `{"op":"send","id":"z1","input":"forged"}`
	testkit.WantErrno(t, "uid 1002 at 1001's session, relayed", relayed(1002, "home/1001/agent/coder/session/k", send), syscall.EACCES)
	testkit.WantErrno(t, "a session that does not exist, relayed", relayed(1001, "home/1001/agent/coder/session/nosuch", send), syscall.ENOENT)
	testkit.WantErrno(t, "a session of another agent, relayed", relayed(1001, "home/1001/agent/other/session/k", send), syscall.EINVAL)
	testkit.WantErrno(t, "a path that is no session, relayed", relayed(1001, "home/1001/agent/coder/session/k/../k", send), syscall.EINVAL)
	if diffs, _ := hostDiffs(before, hostSnapshot(t, c.store)); len(diffs) > 0 {
		t.Errorf("refused ctl requests changed the store:\n%s", strings.Join(diffs, "\n"))
	}
}
