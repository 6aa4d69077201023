package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
)

// Bounds of a run's control socket: a request is one line of at most
// proto.MaxControlRequest bytes, sent within proto.ControlRequestWait; at
// most maxControlConns connections are served at once (each waits for a
// person at most), as many more are refused EAGAIN, and any beyond those
// are closed unanswered.
const (
	refusedReadTimeout = time.Second
	controlWriteGrace  = 10 * time.Second
	maxControlConns    = 8
)

// control is a run's control socket (CTX_CONTROL_SOCKET): how the run's
// own processes ask the server for what only the server may decide. Its
// authority is the peer, never the request: a connection is served only
// when the kernel says its process has the run's uid and belongs to the
// run's process tree (its PID namespace for a jailed run, its process
// group and ancestry otherwise); anything else is refused EACCES and
// nothing is recorded. One request per connection: a JSON object with
// "op", answered by one frame. The socket lives in a directory of its own
// made by root, for the run's life, and goes with it.
type control struct {
	dir, path string // on the host
	ln        *net.UnixListener
	uid       uint32
	host      ToolHost
	spec      Spec // the run as it was before the socket: what a kept edit's tool process runs as
	// inJail is the socket opened O_PATH for a jailed run, handed to its
	// trampoline as controlFD and bound into the jail; nil for another.
	inJail *os.File

	mu       sync.Mutex
	tree     *processTree    // nil until the program started: nothing is served before
	allowRun map[string]bool // tools answered allow_run in this run (SPEC 17)

	slots    chan struct{} // connections being served
	refusals chan struct{} // connections being refused EAGAIN; past them, closed at once
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

// controlOps are the requests a control socket answers, by op.
var controlOps = map[string]func(c *control, ctx context.Context, req []byte) *proto.Object{
	proto.OpPermit:      (*control).permit,
	def.ToolAgentCreate: (*control).createOp,
}

// openControl makes the run's control socket, owned by the run's uid
// (mode 0600: another uid's connect is EACCES at the kernel already) in a
// new directory of root's (0711 for an unjailed run, whose program reaches
// the socket by its path; 0700 for a jailed one, which sees it bound into
// its jail), and starts serving it; requests are refused until started.
func openControl(ctx context.Context, s Spec) (*control, error) {
	dir, err := os.MkdirTemp("", controlPattern())
	if err != nil {
		return nil, abi.Wrap("control", err)
	}
	c := &control{dir: dir, path: filepath.Join(dir, "control"), uid: s.Uid, host: s.Host, spec: s,
		allowRun: map[string]bool{}, slots: make(chan struct{}, maxControlConns), refusals: make(chan struct{}, maxControlConns)}
	jailed := s.Def.Isolation == def.IsolationChroot
	if err := c.listen(s.Gid, jailed); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(1)
	go c.serve()
	return c, nil
}

func (c *control) listen(gid uint32, jailed bool) (err error) {
	if c.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: c.path, Net: "unix"}); err != nil {
		return abi.Wrap("control", err)
	}
	dirMode := os.FileMode(0o711)
	if jailed {
		dirMode = 0o700
		c.inJail, err = os.OpenFile(c.path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err == nil {
		err = os.Chmod(c.path, 0o600)
	}
	if err == nil && os.Geteuid() == 0 {
		err = os.Lchown(c.path, int(c.uid), int(gid))
	}
	if err == nil {
		err = os.Chmod(c.dir, dirMode)
	}
	if err != nil {
		c.ln.Close()
		if c.inJail != nil {
			c.inJail.Close()
		}
		return abi.Wrap("control", err)
	}
	return nil
}

// jailed is the socket for a jailed run's trampoline (controlFD), nil
// for an unjailed run or none. Nil-safe.
func (c *control) jailed() *os.File {
	if c == nil {
		return nil
	}
	return c.inJail
}

// started tells the control socket the run's program: its pid, the
// leader of the run's process group and, for a jailed run, the init of
// its PID namespace.
func (c *control) started(pid int) {
	if c == nil {
		return
	}
	t := &processTree{pid: pid}
	if c.inJail != nil {
		var err error
		if t.pidNS, err = os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid"); err != nil {
			t.pidNS = "unknown" // matches no process: nothing is served
		}
	}
	c.mu.Lock()
	c.tree = t
	c.mu.Unlock()
}

// close stops serving (a request still waiting gets the end of the run:
// proto.DecisionStop), waits for every connection and removes the socket and
// its directory. Nil-safe.
func (c *control) close() {
	if c == nil {
		return
	}
	c.cancel()
	c.ln.Close()
	c.wg.Wait()
	if c.inJail != nil {
		c.inJail.Close()
	}
	os.RemoveAll(c.dir)
}

func (c *control) serve() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.dispatch(conn)
	}
}

// dispatch serves conn when a slot is free, else refuses it EAGAIN when
// a refusal slot is, else closes it.
func (c *control) dispatch(conn *net.UnixConn) {
	select {
	case c.slots <- struct{}{}:
		c.goWith(c.slots, func() { c.handle(conn) })
		return
	default:
	}
	select {
	case c.refusals <- struct{}{}:
		c.goWith(c.refusals, func() {
			readRequest(conn, refusedReadTimeout) // so that the client reads the refusal
			reply(conn, proto.ErrorFrame(abi.Errorf(syscall.EAGAIN, "control", "the run's control socket serves %d connections at once", maxControlConns)))
		})
	default:
		conn.Close()
	}
}

// goWith runs f on a goroutine that holds one of slots.
func (c *control) goWith(slots chan struct{}, f func()) {
	c.wg.Add(1)
	go func() {
		defer func() { <-slots; c.wg.Done() }()
		f()
	}()
}

// handle serves one connection: the peer first, then its one request. A
// refused peer's request is read too (for a short while), so that its
// client gets the refusal rather than a broken pipe, and then dropped.
func (c *control) handle(conn *net.UnixConn) {
	refused := c.authorize(conn)
	wait := proto.ControlRequestWait
	if refused != nil {
		wait = refusedReadTimeout
	}
	req, err := readRequest(conn, wait)
	switch {
	case refused != nil:
		reply(conn, proto.ErrorFrame(refused))
		return
	case err != nil:
		reply(conn, proto.ErrorFrame(err))
		return
	}
	var head struct {
		Op string `json:"op"`
	}
	json.Unmarshal(req, &head)
	op, ok := controlOps[head.Op]
	if !ok {
		reply(conn, proto.ErrorFrame(abi.Errorf(syscall.EINVAL, "control", "unknown op %q", truncateName(head.Op))))
		return
	}
	reply(conn, op(c, c.ctx, req))
}

// readRequest reads the one request line: EMSGSIZE past its bound, EINVAL
// when it is not a JSON object.
func readRequest(conn *net.UnixConn, wait time.Duration) ([]byte, error) {
	conn.SetReadDeadline(time.Now().Add(wait))
	line, tooLong, err := proto.ReadLine(bufio.NewReaderSize(conn, 64<<10), proto.MaxControlRequest)
	switch {
	case tooLong:
		return nil, abi.Errorf(syscall.EMSGSIZE, "control", "a request is at most %d bytes", proto.MaxControlRequest)
	case err != nil && len(line) == 0:
		return nil, abi.Errorf(syscall.EINVAL, "control", "no request: %v", err)
	}
	line = bytes.TrimSpace(line)
	if !json.Valid(line) || len(line) == 0 || line[0] != '{' {
		return nil, abi.Errorf(syscall.EINVAL, "control", "a request is one JSON object")
	}
	return line, nil
}

// reply writes one frame and closes the connection.
func reply(conn *net.UnixConn, f *proto.Object) {
	conn.SetWriteDeadline(time.Now().Add(controlWriteGrace))
	conn.Write(f.Line()) // one line, its newline included
	conn.Close()
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// authorize checks the peer the kernel names (SO_PEERCRED, and the
// pidfd of that process, SO_PEERPIDFD): the run's uid, in the run's
// process tree; and still the same process once that was read from /proc
// (its pid was not reused meanwhile).
func (c *control) authorize(conn *net.UnixConn) error {
	c.mu.Lock()
	tree := c.tree
	c.mu.Unlock()
	refused := abi.Errorf(syscall.EACCES, "control", "only the run's own processes may use its control socket")
	cred, pidfd, err := peerOf(conn)
	if err != nil {
		return refused
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if tree == nil || cred.Uid != c.uid || !tree.holds(int(cred.Pid)) {
		return refused
	}
	if pidfd >= 0 && unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return refused
	}
	return nil
}

// peerOf is the connecting process's credentials and, where the kernel
// gives one (Linux 6.5), a pidfd of it (-1 otherwise).
func peerOf(conn *net.UnixConn) (cred *unix.Ucred, pidfd int, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, -1, err
	}
	pidfd = -1
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if pfd, perr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); perr == nil {
			pidfd = pfd
		}
	})
	if cerr != nil {
		err = cerr
	}
	if err != nil && pidfd >= 0 {
		unix.Close(pidfd)
		pidfd = -1
	}
	return cred, pidfd, err
}

// processTree is a started run's processes: those in the PID namespace
// whose init is pid (a jailed run: nobody enters a namespace without a
// capability the run has not), or those in pid's process group that
// descend from pid (an unjailed one: a process of the uid elsewhere could
// join the group, from the server's session, but not be pid's
// descendant).
type processTree struct {
	pid   int
	pidNS string // the jail's /proc/PID/ns/pid link
}

// maxAncestry bounds the walk from a process up to the run's.
const maxAncestry = 4096

func (t *processTree) holds(pid int) bool {
	if pid <= 0 {
		return false
	}
	if t.pidNS != "" {
		ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
		return err == nil && ns == t.pidNS
	}
	if _, pgrp, ok := procParent(pid); !ok || pgrp != t.pid {
		return false
	}
	for i := 0; i < maxAncestry && pid > 1; i++ {
		if pid == t.pid {
			return true
		}
		ppid, _, ok := procParent(pid)
		if !ok {
			return false
		}
		pid = ppid
	}
	return false
}

// procParent is a process's parent and process group, from /proc.
func procParent(pid int) (ppid, pgrp int, ok bool) {
	f := procStat(pid)
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}
