package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session"
)

// cmdFsck verifies a store from scratch: one line per problem, exit 0 when
// clean and 1 when not (2 for bad usage). Progress goes to a terminal's
// stderr only, so that scripts read problems alone.
func cmdFsck(args []string) int {
	f, err := parseFlags(args, []string{"store"}, []string{"repair"})
	if err != nil || len(f.args) > 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	store, err := f.absFlag("store", defaultStore())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	if _, err := os.Stat(store); err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	served := refuseServedStorePath(store) != nil
	if f.bools["repair"] && served {
		// Repair replays the journal and cuts torn appends: never under a
		// live server, whose logs and journal it would change under it.
		fmt.Fprintln(os.Stderr, "ctxfs: fsck --repair:", refuseServedStorePath(store))
		return 2
	}
	tty := isTerminal(os.Stderr)
	progress := func(done, total int) {
		if tty {
			fmt.Fprintf(os.Stderr, "\rfsck: %d/%d sessions", done, total)
		}
	}
	problems, err := session.Fsck(store, f.bools["repair"], served, session.FsckReport{
		Problem:  func(path, what string) { clearLine(tty); fmt.Printf("%s: %s\n", path, what) },
		Repaired: func(path, what string) { clearLine(tty); fmt.Printf("%s: repaired: %s\n", path, what) },
		Progress: progress,
	})
	clearLine(tty)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	if problems > 0 {
		return 1
	}
	return 0
}

// refuseServedStorePath refuses a store that a live server holds.
func refuseServedStorePath(store string) error {
	st, err := storefs.Open(store)
	if err != nil {
		return err
	}
	defer st.Close()
	return refuseServedStore(st)
}

func clearLine(tty bool) {
	if tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
