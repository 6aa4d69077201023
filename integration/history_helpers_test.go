package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A history checker in the style of Jepsen's, for sends (SPEC 7, 8, 19).
// Clients send uniquely tagged messages to private sessions (one client
// each) and shared sessions (several clients each), one send after
// another; each send is recorded as invoked, then as acknowledged (its
// start frame arrived: the start event and the user message are durable,
// SPEC 6 "recorded means durable"; whether done came is noted), refused
// (an error before start that by SPEC 8 writes nothing, or a connection
// refused: nothing was sent), failed (another error before start: the
// failure may come after the write), or indeterminate (the connection was
// lost or timed out before start). An op not acknowledged may be sent
// again with the same id and input (a replay, SPEC 8, when the first
// landed); its outcome is the best any attempt had, and a retry refused
// leaves an earlier cut attempt's "absent or once". Clients connect as
// uids of their own (uidDialer) or as root. checkHistory then compares the
// history with the sessions' logs as a reader finds them (through a
// mount, or in the store). The schedule runner that drives faults
// against hosts is in history_test.go.

// histSession is a session the clients send to: the private session
// NAME of uid at agent coder, or the shared session NAME of space SPACE.
type histSession struct {
	name  string
	space string // "" for a private session
	uid   uint32 // a private session's owner
}

func (s histSession) String() string {
	if s.space == "" {
		return fmt.Sprintf("private:%d/%s", s.uid, s.name)
	}
	return "shared:" + s.space + "/" + s.name
}

// rel is the session's directory under a mount root or a store (the two
// share the layout).
func (s histSession) rel() string {
	if s.space == "" {
		return filepath.Join("home", fmt.Sprint(s.uid), "agent", "coder", "session", s.name)
	}
	return filepath.Join("shared", s.space, "agent", "coder", "session", s.name)
}

// scopeFields are the request fields that name the session's scope.
func (s histSession) scopeFields() string {
	if s.space == "" {
		return ""
	}
	return fmt.Sprintf(`,"scope":"shared","space":%q`, s.space)
}

// sendLine is the send request of one op: its tag is both its client id
// and its input, so the message and the start event each name it.
func (s histSession) sendLine(tag string) string {
	return fmt.Sprintf(`{"op":"send","id":%q,"session":%q%s,"input":%q}`, tag, s.name, s.scopeFields(), tag)
}

// histClient is one client of the schedules: it sends as cred (nil:
// root, from this process) through its own dialer.
type histClient struct {
	cred   *cred
	dialer *uidDialer // nil for root
}

// dial connects to the socket at path as the client.
func (c *histClient) dial(path string) (net.Conn, error) {
	if c.dialer == nil {
		return net.DialTimeout("unix", path, time.Second)
	}
	return c.dialer.dial(path)
}

// request sends one request line as the client and reads every frame.
func (c *histClient) request(sock, line string) ([]frame, error) {
	conn, err := c.dial(sock)
	if err != nil {
		return nil, err
	}
	return requestOn(conn, line, opLimit)
}

// opOutcome is what a client learnt of one send.
type opOutcome int

const (
	opPending       opOutcome = iota // invoked, no answer yet
	opAcked                          // the start frame arrived: durable, present exactly once
	opRefused                        // refused before anything was written: absent
	opFailed                         // an error frame before start: absent or present once
	opIndeterminate                  // connection lost or timed out before start: absent or once
)

func (o opOutcome) String() string {
	return [...]string{"pending", "acked", "refused", "failed", "indeterminate"}[o]
}

// refusalCodes are the error codes of a send refused before it writes
// anything (SPEC 8 steps 1 to 6: validation, access, a missing space, a
// bad cwd); ECONNREFUSED stands for a connection refused (no server):
// the request was never sent.
var refusalCodes = map[string]bool{"EINVAL": true, "EMSGSIZE": true, "EACCES": true, "ENOENT": true, "ENOTDIR": true, "ECONNREFUSED": true}

// histOp is one send of the history.
type histOp struct {
	client, seq int  // the client, and this op's number among its ops
	attempts    int  // sends of it (a retry has the same id and input)
	cutFirst    bool // its first attempt ended indeterminate or failed: a retry may be a replay
	session     histSession
	tag         string // unique in the history
	outcome     opOutcome
	done        bool   // the done frame arrived too
	run         string // the run its start frame named
	errno       string // of a refused or failed op; why an indeterminate one is
	host        string // the host the client sent through
	invoked     time.Time
	acked       time.Time // when the start frame arrived
}

// history is every op of one schedule, in the order invoked.
type history struct {
	mu     sync.Mutex
	prefix string // every tag starts with it: "h<seed>-"
	ops    []*histOp
}

// invoke records a new op of client on session and returns it.
func (h *history) invoke(client, seq int, s histSession, host string) *histOp {
	op := &histOp{client: client, seq: seq, session: s, host: host, invoked: time.Now(),
		tag: fmt.Sprintf("%sc%d-op%d-%x", h.prefix, client, seq, time.Now().UnixNano()&0xffffff)}
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
	return op
}

// settle records what became of an attempt at op. A retry refused
// leaves an op whose earlier attempt may have landed as it was (absent
// or once).
func (h *history) settle(op *histOp, outcome opOutcome, done bool, errno string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if op.attempts == 1 && (outcome == opIndeterminate || outcome == opFailed) {
		op.cutFirst = true
	}
	if outcome == opRefused && (op.outcome == opIndeterminate || op.outcome == opFailed) {
		outcome, errno = op.outcome, op.errno+"; retry: "+errno
	}
	op.outcome, op.done, op.errno = outcome, done, errno
}

// retryable: op was not acknowledged and the server did not refuse it
// (no server listening is no refusal): a retry with its id and input may
// settle it.
func (op *histOp) retryable() bool {
	switch op.outcome {
	case opIndeterminate, opFailed:
		return true
	case opRefused:
		return op.errno == "ECONNREFUSED"
	}
	return false
}

// markAcked records op's start frame, which named run.
func (h *history) markAcked(op *histOp, run string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.outcome, op.acked, op.run = opAcked, time.Now(), run
}

// snapshot is a copy of every op, for the checker.
func (h *history) snapshot() []histOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]histOp, len(h.ops))
	for i, op := range h.ops {
		out[i] = *op
	}
	return out
}

// opLimit bounds one send: a paused server (SIGSTOP) holds its clients
// for at most the pause, well within it.
const opLimit = 10 * time.Second

// sendOp sends op as client c over the Unix socket sock and records its
// outcome, reading frames as they come: the start frame acknowledges it.
// cancel closing aborts it (indeterminate).
func (h *history) sendOp(c *histClient, sock string, op *histOp, cancel <-chan struct{}) {
	h.mu.Lock()
	op.attempts++
	h.mu.Unlock()
	conn, err := c.dial(sock)
	if err != nil {
		code := errnoOf(err)
		if code == "ECONNREFUSED" || code == "ENOENT" { // no server listens: nothing was sent
			h.settle(op, opRefused, false, "ECONNREFUSED")
		} else {
			h.settle(op, opIndeterminate, false, "dial: "+err.Error())
		}
		return
	}
	defer conn.Close()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-cancel:
			conn.Close()
		case <-finished:
		}
	}()
	conn.SetDeadline(time.Now().Add(opLimit))
	if _, err := conn.Write([]byte(op.session.sendLine(op.tag) + "\n")); err != nil {
		h.settle(op, opIndeterminate, false, "write: "+err.Error())
		return
	}
	started := false
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var f frame
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			break // a torn frame: the connection was cut
		}
		switch {
		case f["type"] == "start":
			started = true
			run, _ := f["run"].(string)
			h.markAcked(op, run)
		case f["type"] == "done" && started:
			h.settle(op, opAcked, true, "")
			return
		case f["type"] == "error" && !started:
			code, _ := f["code"].(string)
			if refusalCodes[code] {
				h.settle(op, opRefused, false, code)
			} else {
				h.settle(op, opFailed, false, code)
			}
			return
		}
	}
	if !started {
		why := "connection closed before start"
		if err := sc.Err(); err != nil {
			why = err.Error()
		}
		h.settle(op, opIndeterminate, false, why)
	}
}

// errnoOf is the errno name in err, "" when it has none.
func errnoOf(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		switch e {
		case syscall.ECONNREFUSED:
			return "ECONNREFUSED"
		case syscall.ENOENT:
			return "ENOENT"
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return ""
}

// sessionLogs are a session's two logs as a reader found them.
type sessionLogs struct{ messages, events string }

// readSessionLogs reads each session's logs under root (a mount root or
// a store): a session that was never made has empty logs.
func readSessionLogs(root string, sessions []histSession) (map[histSession]sessionLogs, error) {
	out := map[histSession]sessionLogs{}
	for _, s := range sessions {
		var l sessionLogs
		for name, dst := range map[string]*string{"messages.jsonl": &l.messages, "events.jsonl": &l.events} {
			b, err := os.ReadFile(filepath.Join(root, s.rel(), name))
			if err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			*dst = string(b)
		}
		out[s] = l
	}
	return out, nil
}

// violation is one finding of the checker; kind names the rule broken.
type violation struct{ kind, msg string }

func (v violation) String() string { return v.kind + ": " + v.msg }

// Kinds of violation.
const (
	vLost        = "lost"       // an acknowledged send is absent
	vDuplicate   = "duplicate"  // a send is present more than once
	vNeverSent   = "never-sent" // a message no op of the history sent
	vRefusedHere = "refused-but-present"
	vMisplaced   = "misplaced"    // present in a session it was not sent to
	vTorn        = "torn"         // a log ends in a partial line
	vUnparseable = "unparseable"  // a line that is not one JSON object
	vOrder       = "order"        // acknowledged before another was invoked, yet after it in the log
	vStartEvents = "start-events" // not one start event per user message
	vDoneEvents  = "done-events"  // a run started without exactly one done
)

// checkHistory compares the ops with the sessions' logs: every
// acknowledged op's message present exactly once, in its session, with
// one start event; a refused op absent; a failed or indeterminate op
// absent or present once; no message that no op sent; no torn or
// unparseable line; and real-time order: an op acknowledged before
// another was invoked precedes it in their session's log (so each
// client's acknowledged ops keep their order).
func checkHistory(ops []histOp, logs map[histSession]sessionLogs) []violation {
	var vs []violation
	known := map[string]bool{}
	for _, op := range ops {
		known[op.tag] = true
	}
	found := map[string][]histSession{}          // tag → the session of each copy of its user message
	position := map[histSession]map[string]int{} // session → tag → the line of its first user message
	starts := map[string][]string{}              // tag → the run of each start event naming it as client id
	sessions := make([]histSession, 0, len(logs))
	for s := range logs {
		sessions = append(sessions, s)
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].String() < sessions[j].String() })
	for _, s := range sessions {
		position[s] = map[string]int{}
		msgs, bad := logLines(s, "messages.jsonl", logs[s].messages)
		vs = append(vs, bad...)
		for i, m := range msgs {
			content, _ := m["content"].(string)
			switch {
			case m["role"] != "user":
			case !known[content]:
				vs = append(vs, violation{vNeverSent, fmt.Sprintf("%s holds the user message %q, which no op sent", s, content)})
			default:
				found[content] = append(found[content], s)
				if _, seen := position[s][content]; !seen {
					position[s][content] = i
				}
			}
		}
		events, bad := logLines(s, "events.jsonl", logs[s].events)
		vs = append(vs, bad...)
		for _, e := range events {
			if id, _ := e["client_id"].(string); e["type"] == "start" && known[id] {
				run, _ := e["run"].(string)
				starts[id] = append(starts[id], run)
			}
		}
		vs = append(vs, checkRunsClosed(s, events)...)
	}
	for i := range ops {
		vs = append(vs, checkOp(&ops[i], found[ops[i].tag], starts[ops[i].tag])...)
	}
	return append(vs, checkOrder(ops, position)...)
}

// checkOp judges one op by where its message was found and by the runs
// of the start events that name it.
func checkOp(op *histOp, at []histSession, startRuns []string) []violation {
	var vs []violation
	what := fmt.Sprintf("%s op %s (client %d, %s", op.outcome, op.tag, op.client, op.session)
	if op.errno != "" {
		what += ", " + op.errno
	}
	what += ")"
	inPlace := 0
	for _, s := range at {
		if s == op.session {
			inPlace++
		} else {
			vs = append(vs, violation{vMisplaced, fmt.Sprintf("%s found in %s", what, s)})
		}
	}
	switch {
	case op.outcome == opAcked && inPlace == 0:
		vs = append(vs, violation{vLost, what + " is absent"})
	case op.outcome == opRefused && inPlace > 0:
		vs = append(vs, violation{vRefusedHere, what + " is present"})
	case inPlace > 1:
		vs = append(vs, violation{vDuplicate, fmt.Sprintf("%s is present %d times", what, inPlace)})
	}
	if len(startRuns) != len(at) {
		vs = append(vs, violation{vStartEvents, fmt.Sprintf("%s: %d start events, %d user messages", what, len(startRuns), len(at))})
	}
	if op.run != "" && len(startRuns) == 1 && startRuns[0] != op.run {
		vs = append(vs, violation{vStartEvents, fmt.Sprintf("%s: its start frame named run %s, its start event %s", what, op.run, startRuns[0])})
	}
	return vs
}

// checkOrder: within a session, an op acknowledged before another op was
// invoked comes first in the log.
func checkOrder(ops []histOp, positions map[histSession]map[string]int) []violation {
	var vs []violation
	bySession := map[histSession][]*histOp{}
	for i := range ops {
		if ops[i].outcome == opAcked {
			bySession[ops[i].session] = append(bySession[ops[i].session], &ops[i])
		}
	}
	for s, acked := range bySession {
		pos := positions[s]
		sort.Slice(acked, func(i, j int) bool { return acked[i].acked.Before(acked[j].acked) })
		for i, a := range acked {
			pa, ok := pos[a.tag]
			if !ok {
				continue // lost: said by checkOp
			}
			for _, b := range acked[i+1:] {
				if pb, ok := pos[b.tag]; ok && a.acked.Before(b.invoked) && pb < pa {
					vs = append(vs, violation{vOrder, fmt.Sprintf("%s: %s was acknowledged before %s was invoked, yet follows it in the log", s, a.tag, b.tag)})
				}
			}
		}
	}
	return vs
}

// checkRunsClosed: every run started in a session has exactly one done
// event (the checker reads the logs after the sessions were recovered:
// a run a kill interrupted is closed by then).
func checkRunsClosed(s histSession, events []map[string]any) []violation {
	var vs []violation
	dones := map[string]int{}
	var runs []string
	for _, e := range events {
		run, _ := e["run"].(string)
		switch e["type"] {
		case "start":
			runs = append(runs, run)
		case "done":
			dones[run]++
		}
	}
	for _, run := range runs {
		if dones[run] != 1 {
			vs = append(vs, violation{vDoneEvents, fmt.Sprintf("%s: run %s has %d done events", s, run, dones[run])})
		}
	}
	return vs
}

// logLines parses a log's lines: a final partial line is torn, a line
// that is not one JSON object unparseable.
func logLines(s histSession, name, text string) ([]map[string]any, []violation) {
	var vs []violation
	if text != "" && !strings.HasSuffix(text, "\n") {
		vs = append(vs, violation{vTorn, fmt.Sprintf("%s %s ends in a partial line %q", s, name, lastLines(text, 1))})
		text = text[:strings.LastIndexByte(text, '\n')+1]
	}
	var out []map[string]any
	for i, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if l == "" && text == "" {
			break
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m == nil {
			vs = append(vs, violation{vUnparseable, fmt.Sprintf("%s %s line %d is not a JSON object: %q", s, name, i+1, l)})
			continue
		}
		out = append(out, m)
	}
	return out, vs
}

// historySummary is one line on a schedule's ops.
func historySummary(ops []histOp) string {
	n := map[opOutcome]int{}
	done, retried, cutFirst := 0, 0, 0
	for _, op := range ops {
		if op.cutFirst {
			cutFirst++
		}
		n[op.outcome]++
		if op.done {
			done++
		}
		if op.attempts > 1 {
			retried++
		}
	}
	return fmt.Sprintf("ops invoked %d (retried %d, %d of them cut at the first try), acked %d (done %d), refused %d, failed %d, indeterminate %d, pending %d",
		len(ops), retried, cutFirst, n[opAcked], done, n[opRefused], n[opFailed], n[opIndeterminate], n[opPending])
}

// fdDialer is a python3 helper, run as a client's uid, that connects to
// Unix sockets for the test process: for each path it receives on its
// socket (argv[1] is the descriptor), it connects within 1 s and hands
// the connected descriptor back (SCM_RIGHTS), or the errno number.
const fdDialer = `
import os, socket, sys
ctl = socket.socket(fileno=int(sys.argv[1]))
while True:
    path = ctl.recv(4096)
    if not path:
        sys.exit(0)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(path.decode())
    except OSError as e:
        ctl.send(b"E%d" % (e.errno or 0))
    else:
        s.setblocking(True)
        socket.send_fds(ctl, [b"ok"], [s.fileno()])
    s.close()
`

// uidDialer connects to Unix sockets as another uid: its helper connects
// and hands the descriptor back, so the server sees the peer credentials
// of that uid (fixed at connect) while this process streams the frames.
type uidDialer struct {
	mu  sync.Mutex // one dial at a time over ctl
	ctl *net.UnixConn
}

// newUIDDialer starts a dialer running as c; it is killed by PID in
// t.Cleanup (and dies with this process).
func newUIDDialer(t testing.TB, c *cred) *uidDialer {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	testkit.Must(t, err)
	child := os.NewFile(uintptr(fds[1]), "dialer-child")
	defer child.Close()
	cmd := exec.Command("/usr/bin/python3", "-c", fdDialer, "3")
	cmd.ExtraFiles = []*os.File{child}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=/"}
	cmd.Dir = "/"
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = testkit.ChildAttr()
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { kill9(cmd) })
	f := os.NewFile(uintptr(fds[0]), "dialer")
	defer f.Close()
	conn, err := net.FileConn(f)
	testkit.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	return &uidDialer{ctl: conn.(*net.UnixConn)}
}

// dial connects to the socket at path as the dialer's uid; a refused
// connect is its errno (a syscall.Errno, as net.Dial's would hold).
func (d *uidDialer) dial(path string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctl.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := d.ctl.Write([]byte(path)); err != nil {
		return nil, err
	}
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := d.ctl.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	if reply := string(buf[:n]); reply != "ok" {
		var errno int
		if _, err := fmt.Sscanf(reply, "E%d", &errno); err != nil {
			return nil, fmt.Errorf("dialer: %q", reply)
		}
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: syscall.Errno(errno)}
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("dialer: no descriptor (%v)", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("dialer: no descriptor (%v)", err)
	}
	f := os.NewFile(uintptr(fds[0]), path)
	defer f.Close()
	return net.FileConn(f)
}
