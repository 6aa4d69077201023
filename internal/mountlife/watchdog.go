package mountlife

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A watchdog is a small process that a FUSE server starts once it is
// mounted, so that a server killed with SIGKILL never leaves callers
// hanging until someone mounts again. A killed server thread can be stuck
// in the kernel for good (an invalidation waiting for a page that a
// reader's unanswered READ holds, see CleanStale): the process then never
// ends, its /dev/fuse descriptors stay open, and the kernel never ends the
// connection. Nothing inside the server can help, so the watchdog, outside
// it, aborts the server's connections through fusectl and detaches its
// mounts the moment the server dies.
//
// It learns of the death from a parent-death signal (deathSignal): the
// kernel sends it when the thread that forked the watchdog exits, and that
// thread exits only with the process (StartWatchdog pins it). A dying
// process still holding a stuck thread has not closed its descriptors, so
// a pipe would not tell, and a pidfd would not either (it reports only a
// fully exited process). A signal sent by someone else is told apart by
// looking at the server: a dying process has SIGKILL pending (ProcessDying).
//
// A server that stops cleanly tells the watchdog first ("stop" on its
// stdin) and waits until it has exited, then unmounts: the watchdog never
// acts on a device number the kernel may give to a later mount.

// deathSignal is the watchdog's parent-death signal. Its default action is
// to be ignored, so a death before the watchdog listens cannot kill it;
// the watchdog looks at the server once it listens. The watchdog has no
// terminal (it runs in its own session), so no real SIGWINCH arrives.
const deathSignal = syscall.SIGWINCH

// armTimeout bounds how long a server waits for its watchdog to listen,
// and stopTimeout how long it waits for it to leave.
const (
	armTimeout  = 10 * time.Second
	stopTimeout = 2 * time.Second
)

// Conn names one FUSE connection by its mountpoint and its device. The
// device names the connection only while a mount of it exists (the kernel
// gives the number to a later mount once the last is gone), so every
// action on a Conn first checks that it is still mounted.
type Conn struct {
	Dir string
	Dev [2]uint64 // major, minor
}

// ConnAt returns the connection of the topmost FUSE mount at dir.
func ConnAt(dir string) (Conn, bool) {
	dir = filepath.Clean(dir)
	dev, ok := fuseMountAt(dir)
	return Conn{Dir: dir, Dev: dev}, ok
}

// String is "major:minor:dir", as ParseConn reads it.
func (c Conn) String() string { return fmt.Sprintf("%d:%d:%s", c.Dev[0], c.Dev[1], c.Dir) }

// ParseConn reads what String wrote.
func ParseConn(s string) (Conn, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) == 3 {
		ma, err1 := strconv.ParseUint(parts[0], 10, 32)
		mi, err2 := strconv.ParseUint(parts[1], 10, 32)
		if err1 == nil && err2 == nil && filepath.IsAbs(parts[2]) {
			return Conn{Dir: filepath.Clean(parts[2]), Dev: [2]uint64{ma, mi}}, nil
		}
	}
	return Conn{}, fmt.Errorf("bad connection %q (want major:minor:/dir)", s)
}

// OnTop reports whether c is the topmost FUSE mount at its directory.
func (c Conn) OnTop() bool {
	dev, ok := fuseMountAt(c.Dir)
	return ok && dev == c.Dev
}

// mounted reports whether some mount of c's connection is still listed
// (the one at Dir, or a bind copy of it).
func (c Conn) mounted() bool {
	for _, m := range fuseMounts() {
		if m.Dev == c.Dev {
			return true
		}
	}
	return false
}

// abort ends c's connection if it is still mounted, and returns how many
// requests were waiting on it ("" when nothing was done).
func (c Conn) abort() string {
	if !c.mounted() {
		return ""
	}
	return abortConn(c.Dev)
}

// detach lazily unmounts c when it is the topmost mount at its directory,
// and never anything mounted over it or in its place. It unmounts the
// mount it opened, not a path: Dir may be below a directory of a user's
// (clean-stale takes any dead ctxfs mount), who can swap that directory
// for a symlink between the look at the mount table and the unmount, and
// an unmount by path would then detach whatever mount the link reaches.
// The directory is opened without following a symlink (O_PATH asks the
// mount's server nothing), checked to be the very mount listed (its
// mnt_id), and unmounted through its descriptor.
func (c Conn) detach() bool {
	m, ok := topFUSEAt(c.Dir)
	if !ok || m.Dev != c.Dev {
		return false
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, c.Dir, &detachHow)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if id, ok := mountID(fd); !ok || id != m.ID {
		return false
	}
	return unix.Unmount("/proc/self/fd/"+strconv.Itoa(fd), unix.MNT_DETACH) == nil
}

// detachHow opens a mount's directory to unmount it by its descriptor.
var detachHow = unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}

// mountID is the id of the mount the descriptor fd is on, from
// /proc/self/fdinfo (a stat would ask a FUSE mount's server).
func mountID(fd int) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return id, err == nil
		}
	}
	return 0, false
}

// Watchdog is the server's side of a running watchdog process.
type Watchdog struct {
	cmd       *exec.Cmd
	standDown *os.File      // the watchdog's stdin
	stopping  atomic.Bool   // Stop was called: its exit is expected
	exited    chan struct{} // closed once the watchdog has been reaped
	log       *slog.Logger  // the server's: an unexpected exit is logged there
}

// StartWatchdog starts the watchdog program (path, with argv; the program
// calls RunWatchdog) and returns once it listens. The child gets a pipe
// from us as stdin (for Stop), our stderr, fd 3 to report that it
// listens, and extra from fd 4 on. An exit that Stop did not ask for is
// logged to log.
func StartWatchdog(path string, argv []string, extra []*os.File, log *slog.Logger) (*Watchdog, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	armedR, armedW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	defer armedR.Close()
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/", Stdin: stdinR, Stderr: os.Stderr}
	cmd.ExtraFiles = append([]*os.File{armedW}, extra...)
	// Its own session: a Ctrl-C or a kill of the server's process group
	// must not take the watchdog with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: deathSignal}
	w := &Watchdog{cmd: cmd, standDown: stdinW, exited: make(chan struct{}), log: log}
	err = w.start()
	stdinR.Close()
	armedW.Close()
	if err == nil {
		err = waitArmed(armedR)
	}
	if err != nil {
		w.kill()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return w, nil
}

// start forks the watchdog from a goroutine locked to its thread for good:
// the parent-death signal follows the forking thread, not the process, so
// that thread must live exactly as long as the process (or until the
// watchdog has exited, when the goroutine returns and the thread ends).
func (w *Watchdog) start() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := w.cmd.Start(); err != nil {
			started <- err
			close(w.exited)
			return
		}
		started <- nil
		if err := w.cmd.Wait(); !w.stopping.Load() {
			w.log.Error("watchdog gone; a kill -9 of this server may now leave callers hanging", "pid", w.cmd.Process.Pid, "err", err)
		}
		close(w.exited)
	}()
	return <-started
}

// waitArmed waits for the watchdog's "armed" line.
func waitArmed(r *os.File) error {
	r.SetReadDeadline(time.Now().Add(armTimeout))
	line, err := bufio.NewReader(r).ReadString('\n')
	if line != "armed\n" {
		return fmt.Errorf("did not start listening: %q %v", line, err)
	}
	return nil
}

// Stop tells the watchdog that the server is about to unmount cleanly and
// waits until it has exited: only then may the server unmount, so that
// the watchdog never acts on a device number a later mount gets.
func (w *Watchdog) Stop() {
	w.stopping.Store(true)
	w.standDown.Write([]byte("stop\n"))
	w.standDown.Close()
	select {
	case <-w.exited:
	case <-time.After(stopTimeout):
		w.kill()
	}
}

// kill ends a watchdog that does not listen or does not leave. Its stdin
// closes only once it is gone: an end of file without "stop" would tell
// it the server died.
func (w *Watchdog) kill() {
	w.stopping.Store(true)
	if w.cmd.Process != nil {
		w.cmd.Process.Kill()
	}
	<-w.exited
	w.standDown.Close()
}

// RunWatchdog is the watchdog's main: it watches server (its parent) and
// returns false when the server stands down ("stop" on stdin), or true
// once it has ended conns and detached their mounts after the server's
// death. It writes "armed" to armed once it is sure to hear of the death.
func RunWatchdog(server int, conns []Conn, stdin io.Reader, armed io.WriteCloser, log io.Writer) (died bool, err error) {
	notice := make(chan os.Signal, 1)
	signal.Notify(notice, deathSignal)
	// The pidfd tells a server that has fully exited from a pid the kernel
	// gave to another process since.
	pidfd, err := unix.PidfdOpen(server, 0)
	if err != nil && os.Getppid() != server { // gone already
		cleanAfter(server, conns, log)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("watch pid %d: %w", server, err)
	}
	defer unix.Close(pidfd)
	standDown := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		standDown <- line == "stop\n"
	}()
	// A death before we listened sent a signal that nobody heard. We were
	// then handed to another parent (and a pidfd opened since may name
	// another process by now, so do not ask it), or, when a thread of the
	// server is stuck, to that thread: the server is then dying.
	if os.Getppid() != server || serverGone(pidfd, server) {
		cleanAfter(server, conns, log)
		return true, nil
	}
	armed.Write([]byte("armed\n"))
	armed.Close()
	for {
		select {
		case stop := <-standDown:
			if stop {
				return false, nil
			}
			// EOF without "stop": the server's descriptors are gone, so
			// it is exiting without having unmounted.
		case <-notice:
			if !serverGone(pidfd, server) {
				continue // a stray signal: the server lives
			}
		}
		cleanAfter(server, conns, log)
		return true, nil
	}
}

// serverGone reports whether the watched server has exited or is dying.
func serverGone(pidfd, pid int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n > 0 {
		return true // exited: /proc/<pid> may be another process by now
	}
	return ProcessDying(pid)
}

// cleanAfter ends a dead server's connections, then detaches its mounts.
// Aborting first, while the mounts pin the device numbers, makes sure the
// numbers still name this server's connections. What it did is written to
// log only once all is done: log is the server's stderr, often a pipe
// (`make run | tee`) whose reader may be gone or stalled, and a write
// that fails or blocks there must not leave a mount behind.
func cleanAfter(server int, conns []Conn, log io.Writer) {
	var done []string
	for _, c := range conns {
		if waiting := c.abort(); waiting != "" {
			done = append(done, fmt.Sprintf("ctxfs watchdog: server %d died; aborted the connection of %s (%s requests waiting)\n", server, c.Dir, waiting))
		}
	}
	for _, c := range conns {
		if c.detach() {
			done = append(done, fmt.Sprintf("ctxfs watchdog: detached %s\n", c.Dir))
		}
	}
	io.WriteString(log, strings.Join(done, ""))
}

// ProcessDying reports whether pid has exited or is on its way out: its
// first thread a zombie, or a thread with SIGKILL pending. A SIGKILL (or
// exit_group) marks every thread so; a live process never keeps it
// pending, while a thread stuck in the kernel does for as long as it is
// stuck.
func ProcessDying(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err == nil && taskDying(string(b)) {
			return true
		}
	}
	return false
}

// taskDying reads one /proc/<pid>/task/<tid>/status.
func taskDying(status string) bool {
	const sigkill = 1 << (unix.SIGKILL - 1)
	for _, line := range strings.Split(status, "\n") {
		key, val, _ := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch key {
		case "State":
			if strings.HasPrefix(val, "Z") || strings.HasPrefix(val, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if n, err := strconv.ParseUint(val, 16, 64); err == nil && n&sigkill != 0 {
				return true
			}
		}
	}
	return false
}
