package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/fsck"
)

func newFsckCommand() *cobra.Command {
	var store string
	var repair bool
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Verify a store from scratch, one line per problem",
		Long: `Fsck verifies every session of a store: the chained checksums and seals of
its logs, its files and the server's journal. It prints one line per problem
(PATH: what) on stdout, or "clean" when there is none, progress on a
terminal's stderr only. Without --store and $CTXFS_STORE it checks the store
of the server of the mount root ($CTX_ROOT, else /ctx) when one runs there
(its pid file names it), else the default store.

Exit status: 0 the store is clean, 1 it has problems, 2 bad usage or fsck
could not run. --repair replays the journal, cuts torn appends and removes
the leftovers of interrupted writes, saying so for each, and says what to do
about what it cannot repair; it refuses a store that a live server holds.`,
		Example: `  ctxfs fsck
  ctxfs fsck --store /var/lib/ctxfs
  ctxfs umount && ctxfs fsck --repair`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if status := runFsck(store, repair); status != 0 {
				return exitStatus(status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", "", storeFlagHelp)
	cmd.Flags().BoolVar(&repair, "repair", false, "repair what can be repaired (never under a live server)")
	cmd.MarkFlagDirname("store")
	return cmd
}

// runFsck verifies a store from scratch: one line per problem, exit 0 when
// clean and 1 when not (2 when it cannot run). Progress goes to a
// terminal's stderr only, so that scripts read problems alone.
func runFsck(store string, repair bool) int {
	store, err := fsckStore(store)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	if _, err := os.Stat(store); err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	// A check beside a live server retries what appends race; a repair
	// holds the lock, so no server is live beside it.
	served := false
	if !repair {
		served = refuseServedStorePath(store) != nil
	} else {
		// Repair replays the journal and cuts torn appends: never under a
		// live server, whose logs and journal it would change under it,
		// nor beside one that starts meanwhile (it would replay the same
		// journal): the store lock is held until the repair ends.
		held, err := holdStoreForRepair(store)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ctxfs: fsck --repair:", err)
			return 2
		}
		defer held.Close()
	}
	tty := isTerminal(os.Stderr)
	progress := func(done, total int) {
		if tty {
			fmt.Fprintf(os.Stderr, "\rfsck: %d/%d sessions", done, total)
		}
	}
	problems, err := fsck.Check(store, repair, served, fsck.Report{
		Problem: func(path, what string) {
			clearLine(tty)
			if repair {
				what += unrepairedAdvice(what)
			}
			fmt.Printf("%s: %s\n", oneLine(path), oneLine(what))
		},
		Repaired: func(path, what string) {
			clearLine(tty)
			fmt.Printf("%s: repaired: %s\n", oneLine(path), oneLine(what))
		},
		Note: func(path, what string) {
			clearLine(tty)
			fmt.Printf("%s: note: %s\n", oneLine(path), oneLine(what))
		},
		Progress: progress,
		Ways:     func(ways string) { fmt.Fprintln(os.Stderr, "ctxfs: fsck: store ways:", ways) },
	})
	clearLine(tty)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctxfs: fsck:", err)
		return 2
	}
	if problems > 0 {
		return 1
	}
	fmt.Println("clean") // silence would look like fsck did nothing
	return 0
}

// fsckStore is the store fsck checks: --store, else $CTXFS_STORE, else
// the store of the server of the default root (its pid file names it),
// said on stderr since no command line named it, else the default store.
func fsckStore(flag string) (string, error) {
	if flag != "" || os.Getenv("CTXFS_STORE") != "" {
		return absOr(flag, defaultStore())
	}
	root := defaultRoot()
	if h, _, err := rootHolder(root); err == nil && h.pid != 0 && filepath.IsAbs(h.label) {
		fmt.Fprintf(os.Stderr, "ctxfs: fsck: %s, the store of the server of %s (pid %d)\n", h.label, root, h.pid)
		return h.label, nil
	}
	return absOr("", defaultStore())
}

// unrepairedAdvice is what to do about a problem --repair left, by the
// words fsck says it with: --repair cuts only what was never acknowledged
// and never rewrites history, so a log that differs from what its seal
// vouches for is put right by hand.
func unrepairedAdvice(what string) string {
	if strings.Contains(what, "does not match") {
		return "; --repair does not rewrite history: stop the server and put back the bytes the seal vouches for (from a backup), or move the session's directory out of the store to give the session up"
	}
	return ""
}

// oneLine is s with its control characters and bytes that are no UTF-8
// escaped (\n, \x1b): what fsck says quotes a damaged store's bytes (a
// value file's, a name's), and a line of fsck's must be one problem, with
// nothing in it that a terminal would act on.
func oneLine(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u0085'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// holdStoreForRepair takes the store lock exclusive for a repair, or says
// who holds it: a server (refuseServedStore's words), or anything else
// that holds it now (a server of an earlier version, one starting, a
// cluster host).
func holdStoreForRepair(store string) (*os.File, error) {
	st, err := storefs.Open(store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	l, err := openStoreLock(st)
	if err != nil {
		return nil, err
	}
	if unix.Flock(int(l.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		l.Close()
		if err := refuseServedStore(st); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("store %s is locked by another process (a ctxfs starting or stopping); try again", store)
	}
	return l, nil
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
