package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	f, err := parseFlags(args, []string{"root", "store"}, []string{"foreground"})
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
	if !f.bools["foreground"] {
		return startBackground(root, store)
	}
	return serve(root, store)
}

// serve runs the server in this process until SIGINT or SIGTERM.
func serve(root, store string) error {
	if err := ctxfs.CanMount(); err != nil {
		return err
	}
	st, err := storefs.OpenPrivate(store)
	if err != nil {
		return err
	}
	defer st.Close()
	// A server killed while inside the kernel keeps the store lock until
	// its dead connection is aborted (fs.AbortDead); it lets go of it
	// shortly after.
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "shared")} {
		ctxfs.AbortDead(d)
	}
	lock, err := lockStore(st, 5*time.Second)
	if err != nil {
		return err
	}
	defer lock.Close()
	for _, d := range []string{root, filepath.Join(root, "home"), filepath.Join(root, "shared")} {
		ctxfs.CleanStale(d) // a dead server's mount must never hang callers
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
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
	os.WriteFile(pidFile(root), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	defer os.Remove(pidFile(root))
	reportReady()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case <-mounts.Done():
	}
	return nil
}

// lockStore makes sure one server serves a store at a time. A holder
// that is still going away (a killed server being reaped) gets up to
// patience to let go.
func lockStore(store *storefs.Root, patience time.Duration) (*os.File, error) {
	l, err := store.OpenFile(".ctxfs.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(patience)
	for unix.Flock(int(l.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			l.Close()
			return nil, fmt.Errorf("another ctxfs serves %s", store.Path())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return l, nil
}

// pidFile is where a serving ctxfs leaves its pid, for `ctxfs umount`.
func pidFile(root string) string { return filepath.Join(root, "agent", ".ctxfs.pid") }

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
func startBackground(root, store string) error {
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
	cmd := exec.Command(self, "mount", "--foreground", "--root", root, "--store", store)
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

// cmdUmount stops the server serving root and unmounts cleanly; leftovers
// of a dead server are unmounted lazily.
func cmdUmount(args []string) error {
	f, err := parseFlags(args, []string{"root"}, nil)
	if err != nil {
		return err
	}
	root, err := f.absFlag("root", defaultRoot())
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(pidFile(root)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, syscall.SIGTERM) == nil {
			waitGone(pid, 10*time.Second)
		}
	}
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "shared")} {
		if ctxfs.IsFUSEMount(d) {
			if err := unix.Unmount(d, 0); err != nil {
				ctxfs.CleanStale(d)
			}
		}
	}
	return nil
}

func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
