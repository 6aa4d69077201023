package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

// startWatchdog starts this binary's `watchdog` command for the server's
// connections (see fs.StartWatchdog for why it exists). It gets the
// locked pid file, so that it holds root's watchdog byte until it has
// cleaned up: a next server waits for that. fusectl and umount2 need
// root, so other users' servers go without (their mounts are cleaned by
// the next mount, as before).
func startWatchdog(root string, pidf *os.File, conns []mountlife.Conn, log *slog.Logger) (stopper, error) {
	if os.Geteuid() != 0 {
		return noWatchdog{}, nil
	}
	argv := []string{os.Args[0], "watchdog", "--server", strconv.Itoa(os.Getpid()), "--root", root}
	for _, c := range conns {
		argv = append(argv, c.String())
	}
	// /proc/self/exe: the very binary we run, even if it was replaced on
	// disk since.
	return mountlife.StartWatchdog("/proc/self/exe", argv, []*os.File{pidf}, log)
}

// stopper is a running watchdog, or none.
type stopper interface{ Stop() }

type noWatchdog struct{}

func (noWatchdog) Stop() {}

// cmdWatchdog is the watchdog process (internal: `ctxfs watchdog --server
// PID [--root R] MAJOR:MINOR:DIR...`). Its fd 3 reports that it listens;
// with --root, fd 4 is root's pid file, whose watchdog byte it holds until
// it exits, and which it removes after its server's death.
func cmdWatchdog(args []string) error {
	f := pflag.NewFlagSet("watchdog", pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	server := f.Int("server", 0, "")
	root := f.String("root", "", "")
	if err := f.Parse(args); err != nil || *server <= 0 {
		return usageError("watchdog: --server PID [--root ROOT] MAJOR:MINOR:DIR...")
	}
	var conns []mountlife.Conn
	for _, a := range f.Args() {
		c, err := mountlife.ParseConn(a)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	closeInherited(5)
	pidf, err := holdWatchdogByte(*root)
	if err != nil {
		return err
	}
	died, err := mountlife.RunWatchdog(*server, conns, os.Stdin, os.NewFile(3, "armed"), os.Stderr)
	if died && pidf != nil {
		removeDeadPidFile(*root, pidf)
	}
	return err
}

// holdWatchdogByte locks the watchdog byte of the pid file at fd 4 (none
// without a root).
func holdWatchdogByte(root string) (*os.File, error) {
	if root == "" {
		return nil, nil
	}
	pidf := os.NewFile(4, "pidfile")
	if err := setLock(pidf, unix.F_WRLCK, watchdogByte, 1); err != nil {
		return nil, fmt.Errorf("watchdog: lock %s: %w", pidFile(root), err)
	}
	return pidf, nil
}

// removeDeadPidFile removes root's pid file once its dead server has let
// go of it (the process ends a moment after its connections are aborted).
// No new server can take it while we hold our byte; the file is checked
// to be ours all the same.
func removeDeadPidFile(root string, pidf *os.File) {
	deadline := time.Now().Add(2 * time.Second)
	for lockedBy(pidf, serverByte) != 0 {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if samePath(pidf, pidFile(root)) {
		os.Remove(pidFile(root))
	}
}

// closeInherited closes the descriptors from first on that came with us
// through exec without being meant for us (the server's /dev/fuse
// descriptors among them: go-fuse opens them without close-on-exec, and
// holding them would keep a dead server's connection alive). Those are the
// ones without close-on-exec: everything this process opened itself has it.
func closeInherited(first int) {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, d := range fds {
		fd, err := strconv.Atoi(d.Name())
		if err != nil || fd < first {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}
