package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

// stopLimit is how long `ctxfs umount` waits for a server to stop.
const stopLimit = 10 * time.Second

func newUmountCommand() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:     "umount",
		Aliases: []string{"unmount"},
		Short:   "Stop the server of a root, which unmounts ROOT/home and ROOT/shared",
		Long: `Umount stops the server that serves the root (SIGTERM to the process that
holds the root's lock, through a pidfd), which unmounts its own mounts, and
waits until it is gone. Mounts of a dead server are then aborted and
detached, each named on stdout ("ctxfs: cleaned the dead mount DIR …").
A root where nothing is mounted is an error (exit 1).`,
		Example: `  ctxfs umount
  ctxfs umount --root /srv/ctx`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			dir, err := absOr(root, defaultRoot())
			if err != nil {
				return err
			}
			return umount(dir)
		},
	}
	cmd.Flags().StringVar(&root, "root", "", rootFlagHelp)
	cmd.MarkFlagDirname("root")
	return cmd
}

// umount stops the server serving root, which unmounts its own mounts;
// dead leftovers are then aborted and detached. Nothing is signalled
// unless it is this root's live server (verifiedServer).
func umount(root string) error {
	h, err := verifiedServer(root)
	if err != nil {
		return err
	}
	if h.live() {
		if err := stopServer(root, h.pid); err != nil {
			return err
		}
	}
	found, err := cleanLeftovers(root)
	if h.pid == 0 && !found && err == nil {
		return fmt.Errorf("umount: %s: not mounted", root)
	}
	return err
}

// verifiedServer returns the process that serves root, a live one checked
// three ways before anyone signals it: it holds the server lock of root's
// pid file (so it is alive, whatever pid the file says), the file names
// the same pid, and its command line is a `ctxfs mount`.
func verifiedServer(root string) (holder, error) {
	h, _, err := rootHolder(root)
	if err != nil || !h.live() {
		return h, err // a dying server is not signalled: its watchdog cleans up
	}
	if h.named != h.pid || !isMountCommand(h.pid) {
		return holder{}, fmt.Errorf("%s is locked by pid %d, which is not the ctxfs server it names (pid %d); not signalling anything", pidFile(root), h.pid, h.named)
	}
	return h, nil
}

// isMountCommand reports whether pid runs `… mount …` (ctxfs mount, as
// the background start and users run it).
func isMountCommand(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(b), "\x00")
	return err == nil && len(args) > 1 && args[1] == "mount"
}

// stopServer sends SIGTERM to root's server through a pidfd and waits
// until it has exited. The pidfd pins the process: after it is opened,
// the lock is read once more, so the signal can only reach the process
// that holds root's lock, never one that got its pid since.
func stopServer(root string, pid int) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // gone already
	}
	defer unix.Close(pidfd)
	if h, _, err := rootHolder(root); err != nil || h.pid != pid {
		return err // it let go of root meanwhile
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		return fmt.Errorf("stop pid %d: %w", pid, err)
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(stopLimit)
	for time.Now().Before(deadline) {
		if n, _ := unix.Poll(fds, 100); n > 0 {
			return nil
		}
	}
	return fmt.Errorf("pid %d, serving %s, did not stop within %v", pid, root, stopLimit)
}

// cleanLeftovers aborts and detaches root's mounts that no server answers
// for, naming each on stdout (a dead server's mounts vanish by this
// command, which must say so), and reports whether there was any. A mount that answers although
// root's server is gone is not ours to take: it is reported.
func cleanLeftovers(root string) (found bool, err error) {
	var live []string
	for _, d := range []string{filepath.Join(root, "home"), filepath.Join(root, "shared")} {
		if !mountlife.IsFUSEMount(d) {
			continue
		}
		found = true
		for n := mountlife.CleanStale(d); n > 0; n-- {
			sayCleaned(d)
		}
		if mountlife.LiveFUSEMount(d) {
			live = append(live, d)
		}
	}
	if len(live) > 0 {
		err = fmt.Errorf("%s: served by a process that %s does not name; left alone", strings.Join(live, ", "), pidFile(root))
	}
	return found, err
}
