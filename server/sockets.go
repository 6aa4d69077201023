// Package server wires the session engine to its transports: the agent and
// model sockets here, the FUSE mounts in package fs. It decides no rule.
// With several hosts on one store (forward.go) a follower's sockets relay
// each connection to the writer host, whose sockets serve it as local;
// the wire between hosts is package cluster/peer's, never this one's.
package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/gopool"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Sockets serves one Unix socket per agent and model definition under the
// root: <root>/agent/<name>.sock and <root>/model/<provider>/<model>.sock.
// A definition added while it runs gets its socket at once, and a
// definition removed loses it at once (inotify, defwatch.go); where
// inotify is not to be had, within rescanPeriod.
type Sockets struct {
	engine  atomic.Pointer[session.Engine] // nil: none (a follower host, forward.go)
	forward atomic.Pointer[ForwardFunc]    // set: every local connection is relayed (forward.go)
	relayed atomic.Pointer[quota.Quota]    // a uid's connections relayed at once (EAGAIN beyond)
	root    string
	log     *slog.Logger

	mu        sync.Mutex
	listeners map[string]listening // by socket path
	wg        sync.WaitGroup       // the accept loops and the inotify reader
	loopWG    sync.WaitGroup       // the rescan loop, which alone uses defs once serving
	stop      chan struct{}
	rescan    chan struct{} // one pending request for a rescan; more coalesce
	defs      *defWatch     // nil without inotify
}

// rescanPeriod is how often the definitions are listed again whatever
// inotify said: the fallback, and the bound on a change it missed.
const rescanPeriod = time.Second

// minRescanGap spaces the rescans that events ask for: a flood of
// changes costs at most one listing per gap.
const minRescanGap = 10 * time.Millisecond

// ServeSockets starts serving and watching for new definitions. log gets
// each socket as it starts listening; nil: nowhere. Refused requests go
// to the engine's log, as the ctl files' do (session.Engine.LogRefused).
// e may be nil (a follower host): requests are then refused with EAGAIN
// until SetEngine or SetForward (forward.go) gives them somewhere to go.
func ServeSockets(e *session.Engine, root string, log *slog.Logger) (*Sockets, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{filepath.Join(root, "agent"), filepath.Join(root, "model")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s := &Sockets{root: root, log: log, listeners: map[string]listening{},
		stop: make(chan struct{}), rescan: make(chan struct{}, 1)}
	s.engine.Store(e)
	s.relayed.Store(quota.NewLimits(quota.LimitConfig{}).Conns)
	s.removeStaleSockets()
	s.startWatching()
	if err := s.scan(); err != nil {
		s.Close()
		return nil, err
	}
	s.loopWG.Add(1)
	go s.loop()
	return s, nil
}

// startWatching starts inotify on the definitions' directories, before the
// first listing, so that no change falls between the two. Without it the
// periodic rescan serves alone, which the log says.
func (s *Sockets) startWatching() {
	w, err := newDefWatch()
	if err != nil {
		s.log.Warn("sockets: no inotify; new and removed definitions are seen within "+rescanPeriod.String(), "err", err)
		return
	}
	s.defs = w
	s.watchDirs()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); w.events(s.rescan) }()
}

// watchDirs brings the watched directories up to date (the providers
// come and go), logging the first failure only.
func (s *Sockets) watchDirs() {
	if s.defs == nil {
		return
	}
	if err := s.defs.watch(definitionDirs(s.root)); err != nil && !s.defs.warned {
		s.defs.warned = true
		s.log.Warn("sockets: not every definition directory is watched; changes there are seen within "+rescanPeriod.String(), "err", err)
	}
}

// Close stops listening. The socket files stay, refusing connections:
// SPEC 7 says a down server means ECONNREFUSED, and the next start
// replaces them (listenAt), or removes those whose definition went
// meanwhile (removeStaleSockets).
func (s *Sockets) Close() {
	close(s.stop)
	s.loopWG.Wait() // no watch is added on a descriptor closed (or reused) under it
	if s.defs != nil {
		s.defs.close()
	}
	s.mu.Lock()
	for _, sv := range s.listeners {
		sv.l.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// listening is one socket served: its listener, and the socket file made
// for it, which alone is ever removed: an entry replaced since at its
// path, or a path that now leads elsewhere (a provider's symlink), is
// left alone.
type listening struct {
	l    net.Listener
	file os.FileInfo
}

// close stops listening and removes the socket file at p if it is still
// the one made for it.
func (sv listening) close(p string) error {
	sv.l.Close()
	if st, err := os.Lstat(p); err != nil || !os.SameFile(st, sv.file) {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// loop rescans when inotify asks (at most once per minRescanGap) and every
// rescanPeriod. It alone scans once serving started.
func (s *Sockets) loop() {
	defer s.loopWG.Done()
	t := time.NewTicker(rescanPeriod)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.rescan:
			if !s.pause(minRescanGap - time.Since(last)) {
				return
			}
		}
		last = time.Now()
		// Watch first, then list: a definition made after the watch
		// is added asks for another rescan, one made before is listed.
		s.watchDirs()
		if err := s.scan(); err != nil {
			s.log.Error("sockets", "err", err)
		}
	}
}

// pause waits d (nothing when d <= 0); false when the server stops.
func (s *Sockets) pause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

// scan opens a socket for every definition that has none yet, and closes
// and removes the socket of every definition that is gone: a connection
// to it then fails (ENOENT) instead of reaching a name no longer defined.
// A socket that cannot be opened does not keep the others from opening;
// the first failure is returned.
func (s *Sockets) scan() error {
	agents, models, err := def.List(s.root)
	if err != nil {
		return err
	}
	var targets []session.Target
	for _, a := range agents {
		targets = append(targets, session.Target{Kind: abi.KindAgent, Owner: a})
	}
	for _, m := range models {
		targets = append(targets, session.Target{Kind: abi.KindModel, Owner: m})
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].Owner < targets[j].Owner })
	s.closeUndefined(targets)
	var first error
	for _, t := range targets {
		if err := s.listen(t); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// removeStaleSockets removes, before serving, the sockets a server that
// did not stop cleanly left for definitions removed since: a running
// server removes a definition's socket when the definition goes, so
// after this no socket is there without its definition. Only sockets
// are removed, and only under names this server would have made.
func (s *Sockets) removeStaleSockets() {
	for _, sock := range def.UndefinedSockets(s.root) {
		if os.Remove(sock.Path) == nil {
			s.log.Info("removed a stale socket: its definition is gone", "socket", sock.Path)
		}
	}
}

// closeUndefined closes and removes the sockets of definitions not in
// defined. Connections already accepted go on: a run that started ends
// as it would have.
func (s *Sockets) closeUndefined(defined []session.Target) {
	keep := make(map[string]bool, len(defined))
	for _, t := range defined {
		keep[abi.SocketPath(s.root, t.Kind, t.Owner)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, sv := range s.listeners {
		if keep[p] {
			continue
		}
		if err := sv.close(p); err != nil {
			s.log.Error("sockets: removing the socket of a removed definition", "socket", p, "err", err)
		}
		delete(s.listeners, p)
		s.log.Info("stopped listening: the definition was removed", "socket", p)
	}
}

func (s *Sockets) listen(t session.Target) error {
	p := abi.SocketPath(s.root, t.Kind, t.Owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.listeners[p]; ok {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		sv.l.Close() // its name was removed under it: no one can reach it, so listen anew
		delete(s.listeners, p)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	l, file, err := listenAt(p)
	if err != nil {
		return err
	}
	s.listeners[p] = listening{l: l, file: file}
	s.log.Info("listening", "socket", p, t.Kind, t.Owner)
	s.wg.Add(1)
	go s.accept(l, t)
	return nil
}

// listenAt listens on a Unix socket at p, mode 0666 (anyone may connect:
// authority comes from the peer credentials), without ever acting on a
// path that someone else could have put a symlink at. The socket is bound
// and chmodded in a fresh 0700 directory of ours beside p, where nothing
// but us can be, and then renamed onto p: rename replaces whatever is at p
// (a socket left by a server that died, a stale symlink) as an entry,
// never following it. file is the socket file, as it was in the private
// directory (a rename keeps the inode).
func listenAt(p string) (l *net.UnixListener, file os.FileInfo, err error) {
	private, err := os.MkdirTemp(filepath.Dir(p), ".s") // 0700; a short name, as socket paths are bounded
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(private)
	bound := filepath.Join(private, "s")
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	l.SetUnlinkOnClose(false) // its name moves to p, which Close removes
	if err = os.Chmod(bound, 0o666); err == nil {
		file, err = os.Lstat(bound)
	}
	if err == nil {
		err = os.Rename(bound, p)
	}
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, file, nil
}

func (s *Sockets) accept(l *net.UnixListener, t session.Target) {
	defer s.wg.Done()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		gopool.Go(func() { s.serveConn(conn, t) }) // a kept goroutine keeps its grown stack
	}
}

// frameDeadline is how long a client may leave a frame unread before the
// connection is dropped (the run goes on, and `resume` follows it again).
const frameDeadline = 30 * time.Second

// serveConn answers the one request of a local connection, from the
// caller its peer credentials say: here, or relayed whole to the writer
// host while a forward is set (forward.go).
func (s *Sockets) serveConn(conn *net.UnixConn, t session.Target) {
	defer conn.Close()
	c, err := peerCaller(conn)
	if err != nil {
		return
	}
	if fwd := s.forward.Load(); fwd != nil {
		s.relay(conn, c, t, *fwd)
		return
	}
	s.serve(conn, c, t)
}

// serve answers the one request of conn, from caller c, within c's quota
// of connections (EAGAIN beyond it, at once), with the engine of the
// moment (EAGAIN when there is none).
func (s *Sockets) serve(conn net.Conn, c layout.Caller, t session.Target) {
	s.serveWith(conn, c, t, "", nil)
}

// beginFunc begins a parsed request with the engine of the moment; nil
// is a socket's request (Engine.Begin, imports included).
type beginFunc func(e *session.Engine, req *proto.Request) (*session.Reply, error)

// serveWith is serve with the request begun by begin; a request written
// to the ctl of a session in space (relayed from another host) leaves its
// scope and space out as it may there (proto.ParseControlRequest).
func (s *Sockets) serveWith(conn net.Conn, c layout.Caller, t session.Target, space string, begin beginFunc) {
	e := s.engine.Load()
	w := writers.Get().(*bufio.Writer)
	w.Reset(conn)
	defer func() { w.Reset(nil); writers.Put(w) }()
	if e == nil {
		s.refuseNoEngine(conn, w, c, t)
		return
	}
	if err := e.Limits().Conns.Take(c.Uid); err != nil {
		s.refuse(e, conn, w, err, c, t, nil)
		return
	}
	defer e.Limits().Conns.Give(c.Uid)
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() { br.Reset(nil); readers.Put(br) }()
	line, err := readWithin(conn, br)
	var req *proto.Request
	if err == nil {
		req, err = proto.ParseControlRequest(line, space)
	}
	if err == nil && begin == nil && !def.Defined(s.root, t.Kind, t.Owner) {
		err = def.NotDefined(t.Kind, t.Owner) // a connection accepted just before its definition went
	}
	if err == nil && begin == nil && req.Op == proto.OpImport {
		s.serveImport(e, conn, w, c, t, req, line, br)
		return
	}
	var reply *session.Reply
	switch {
	case err != nil:
	case begin != nil:
		reply, err = begin(e, req)
	default:
		reply, err = e.Begin(context.Background(), c, t, req)
	}
	if err != nil {
		s.refuse(e, conn, w, err, c, t, req)
		return
	}
	defer reply.Close()
	// A client that half-closes after its request still reads the reply:
	// only a hang-up (hangup.go) or a failed write ends it.
	ctx, cancel := watchHangUp(conn)
	defer cancel()
	for {
		f, err := reply.Next(ctx)
		if err != nil {
			return
		}
		// What is ready now goes out with one write (a fast agent's
		// frames and its done are released by one commit together).
		for f != nil {
			writeFrame(conn, w, f)
			if f, err = reply.TryNext(); err != nil {
				break
			}
		}
		if flush(conn, w) != nil {
			return // the client left, or does not read: the run goes on without it
		}
		if err != nil {
			return
		}
	}
}

// writers are the connections' write buffers, reused: a send's
// connection lives a few milliseconds, and a buffer each was a share of
// the garbage the collector spent the server's CPU on.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// writeFrame buffers f; a socket write it causes (the buffer is full) gets
// a fresh frameDeadline, as the flush does.
func writeFrame(conn net.Conn, w *bufio.Writer, f *proto.Object) {
	line := f.Line()
	if len(line) > w.Available() {
		conn.SetWriteDeadline(time.Now().Add(frameDeadline))
	}
	w.Write(line)
}

// flush writes what is buffered within frameDeadline.
func flush(conn net.Conn, w *bufio.Writer) error {
	if w.Buffered() > 0 {
		conn.SetWriteDeadline(time.Now().Add(frameDeadline))
	}
	return w.Flush()
}

// refuse answers a refused request with its error frame (written within
// frameDeadline, or not at all), and records it (session.Engine.Refuse;
// with no engine, this server's log at debug level).
func (s *Sockets) refuse(e *session.Engine, conn net.Conn, w *bufio.Writer, err error, c layout.Caller, t session.Target, req *proto.Request) {
	var f *proto.Object
	if e != nil {
		f = e.Refuse(c, t, req, err)
	} else {
		s.log.Debug("refused", "errno", abi.ErrnoName(abi.Errno(err)), t.Kind, t.Owner, "uid", c.Uid, "reason", abi.Clip(err.Error(), 200))
		f = proto.ErrorFrame(err)
	}
	writeFrame(conn, w, f)
	flush(conn, w)
}

// readWithin reads one request line within quota.RequestDeadline: one
// that sends no complete line holds a descriptor for nothing.
func readWithin(conn net.Conn, br *bufio.Reader) ([]byte, error) {
	conn.SetReadDeadline(time.Now().Add(quota.RequestDeadline))
	defer conn.SetReadDeadline(time.Time{})
	return readRequest(br)
}

// readRequest reads one line of at most abi.MaxRequestBytes (EMSGSIZE
// beyond). A final line without its newline counts as the request.
func readRequest(br *bufio.Reader) ([]byte, error) {
	line, err := proto.ReadLineWithin(br, abi.MaxRequestBytes) // a copy: the buffer goes back to the pool
	switch {
	case err == nil:
		return line, nil
	case errors.Is(err, proto.ErrLineTooLong):
		return nil, proto.RequestTooLong("")
	case errors.Is(err, io.EOF) && len(line) > 0:
		return line, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, abi.Errorf(syscall.ETIMEDOUT, "", "no complete request within %s", quota.RequestDeadline)
	default:
		return nil, abi.Errorf(syscall.EINVAL, "", "no request")
	}
}

// readers are the request readers, reused: 64 KiB each, which a
// connection used to allocate (and clear) for a request of a few hundred
// bytes (docs/benchmarks.md#send-path).
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64*1024) }}

// peerCaller is the connecting process's identity from SO_PEERCRED, with
// its supplementary groups from /proc.
func peerCaller(conn *net.UnixConn) (layout.Caller, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return layout.Caller{}, err
	}
	var cred *syscall.Ucred
	var groups []uint32
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if cerr == nil {
			groups, cerr = peerGroups(int(fd))
		}
	})
	if cerr != nil {
		return layout.Caller{}, cerr
	}
	// SO_PEERCRED's pid is the peer's process (its thread group), and both
	// it and SO_PEERGROUPS are what the peer was when it connected; reading
	// /proc/PID/status for them cost a tenth of a send's socket path.
	return layout.Caller{Uid: cred.Uid, Gid: cred.Gid, Pid: int(cred.Pid), Groups: groups}, nil
}

// peerGroups reads the peer's supplementary groups (SO_PEERGROUPS, which
// x/sys/unix has no helper for): ERANGE says how much room they need.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf):
			buf = make([]uint32, n/4)
		case e != 0:
			return nil, e
		default:
			return buf[:n/4], nil
		}
	}
}
