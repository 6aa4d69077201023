package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/agent"
	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/server"
	"github.com/ctxfs/ctxfs/session"
)

// readyFD is the descriptor on which a foreground server started by a
// background `ctxfs mount` reports that it serves.
const readyFD = 3

// cmdMount serves a store at a root. Without --foreground it starts the
// server in the background and returns once both mounts answer.
func cmdMount(args []string) error {
	f, err := parseFlags(args, []string{"root", "store", "gc-idle"}, []string{"foreground"})
	if err != nil {
		return err
	}
	if len(f.args) > 0 {
		return usageError("mount takes no arguments\n" + usage)
	}
	root, err := f.absFlag("root", defaultRoot())
	if err != nil {
		return err
	}
	store, err := f.absFlag("store", defaultStore())
	if err != nil {
		return err
	}
	// Refuse here, before any fork: a background start would otherwise
	// report the refusal only as "the server did not start".
	if err := ctxfs.CanMount(); err != nil {
		return err
	}
	if err := refuseServed(root, store); err != nil {
		return err
	}
	gcIdle, err := gcIdleFlag(f)
	if err != nil {
		return err
	}
	if !f.bools["foreground"] {
		return startBackground(root, store, gcIdle)
	}
	return serve(root, store, gcIdle)
}

// gcIdleFlag reads --gc-idle (a Go duration, at least a minute; off by
// default).
func gcIdleFlag(f *flags) (time.Duration, error) {
	v, ok := f.values["gc-idle"]
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		return 0, usageError(fmt.Sprintf("--gc-idle %q is not a duration of a minute or more (e.g. 30m)", v))
	}
	return d, nil
}

// gcIdleLoop archives idle temp-* sessions every interval until stop
// (session.Engine.GCIdle).
func gcIdleLoop(e *session.Engine, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, rel := range e.GCIdle(interval) {
				fmt.Fprintf(os.Stderr, "ctxfs: gc-idle: archived %s\n", rel)
			}
		}
	}
}

// refuseServed refuses a root or a store that a live server serves: its
// mounts are never touched. A dying server is not refused: the server we
// start waits for it to be gone (lockRoot, lockStore).
func refuseServed(root, store string) error {
	h, _, err := rootHolder(root)
	if err != nil {
		return err
	}
	if h.live() {
		return servedError(root, h)
	}
	if err := refuseLiveMounts(root); err != nil {
		return err
	}
	st, err := storefs.OpenPrivate(store)
	if err != nil {
		return err
	}
	defer st.Close()
	return refuseServedStore(st)
}

// cpuProfile starts a CPU profile of the server into the file named (the
// benchmarks' way to see where a server's time goes); nil when none.
func cpuProfile(name string) (stop func()) {
	if name == "" {
		return nil
	}
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: CTXFS_CPUPROFILE:", err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: CTXFS_CPUPROFILE:", err)
		f.Close()
		return nil
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// serve runs the server in this process until SIGINT or SIGTERM; with
// gcIdle, idle temp-* sessions are archived every gcIdle.
func serve(root, store string, gcIdle time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if stop := cpuProfile(os.Getenv("CTXFS_CPUPROFILE")); stop != nil {
		defer stop()
	}
	agent.Enter = self // runs enter their directories after exec (agent.Enter)
	st, err := storefs.OpenPrivate(store)
	if err != nil {
		return err
	}
	defer st.Close()
	pidf, err := lockRoot(root, store)
	if err != nil {
		return err
	}
	defer unlockRoot(root, pidf)
	lock, err := lockStore(st, root)
	if err != nil {
		return err
	}
	defer lock.Close()
	// From here on a SIGTERM (a `ctxfs umount` while we start) stops the
	// server once it serves, instead of killing it half mounted.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if err := prepareMountpoints(root); err != nil {
		return err
	}
	e, err := session.Open(session.Config{Store: store, Root: root})
	if err != nil {
		return err
	}
	defer e.Close()
	socks, err := server.ServeSockets(e, root)
	if err != nil {
		return err
	}
	defer socks.Close()
	mounts, err := mountFS(e, root)
	if err != nil {
		return err
	}
	defer mounts.Unmount()
	wd, err := startWatchdog(root, pidf, mounts.Conns())
	if err != nil {
		return err
	}
	defer wd.Stop() // before the unmount: see fs.Watchdog.Stop
	reportReady()
	if gcIdle > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go gcIdleLoop(e, gcIdle, stop)
	}
	select {
	case <-sig:
	case <-mounts.Done():
	}
	return nil
}

// prepareMountpoints makes root, root/home and root/shared ready to mount
// on: a dead server's mount there is cleaned up (a dead mount must never
// hang callers), and a live one, which no ctxfs of this root serves since
// we hold its lock, is refused rather than mounted over.
func prepareMountpoints(root string) error {
	for _, d := range mountpoints(root) {
		ctxfs.CleanStale(d)
	}
	if err := refuseLiveMounts(root); err != nil {
		return err
	}
	for _, d := range mountpoints(root) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// mountpoints are root and the two mounts below it.
func mountpoints(root string) []string {
	return []string{root, filepath.Join(root, "home"), filepath.Join(root, "shared")}
}

// refuseLiveMounts refuses to mount over a live FUSE mount at root: with
// no live server holding root's pid file, it is someone else's.
func refuseLiveMounts(root string) error {
	for _, d := range mountpoints(root) {
		if ctxfs.LiveFUSEMount(d) {
			return fmt.Errorf("%s is mounted by a live FUSE server that does not hold %s; unmount it first", d, pidFile(root))
		}
	}
	return nil
}

// reportReady tells a waiting background `ctxfs mount` that we serve.
func reportReady() {
	if os.Getenv("CTXFS_READY_FD") == "" {
		return
	}
	w := os.NewFile(readyFD, "ready")
	w.Write([]byte("ready\n"))
	w.Close()
}

// startBackground starts `ctxfs mount --foreground` detached from the
// terminal, with its output in <store>/ctxfs.log, and waits until it serves.
func startBackground(root, store string, gcIdle time.Duration) error {
	st, err := storefs.OpenPrivate(store)
	if err != nil {
		return err
	}
	logPath := filepath.Join(store, "ctxfs.log")
	logf, err := st.OpenFile("ctxfs.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	st.Close()
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	self, _ := os.Executable()
	args := []string{"mount", "--foreground", "--root", root, "--store", store}
	if gcIdle > 0 {
		args = append(args, "--gc-idle", gcIdle.String())
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = append(os.Environ(), "CTXFS_READY_FD=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ready <- line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if ok {
			fmt.Printf("ctxfs: serving %s (store %s, pid %d, log %s)\n", root, store, cmd.Process.Pid, logPath)
			return nil
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
	}
	tail, _ := os.ReadFile(logPath) // the operator's path, which Secure checked
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("the server did not start; its log (%s) ends:\n%s", logPath, tail)
}
