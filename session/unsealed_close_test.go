package session

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/fsck"
	"github.com/ctxfs/ctxfs/session/layout"
)

// A session whose logs cannot be sealed as they close (their seals made
// immutable: every write to them fails, as an I/O error would) keeps its
// acknowledged lines provable: an archive of it is refused (EIO) and
// writes nothing, whether the close is the archive's own or an eviction's
// before it; after a restart the journal's replay seals them, and fsck
// finds nothing wrong.
func TestUnsealedCloseKeepsSessionInPlace(t *testing.T) {
	for _, how := range []string{"archive closes it", "eviction closed it"} {
		t.Run(how, func(t *testing.T) {
			env := newEnv(t)
			if how == "eviction closed it" {
				testkit.Must(t, env.e.Close())
				env.maxSessions = 1
				env.open()
			}
			ref := layout.Ref{Container: coderDefault().Container, Name: "temp-old"}
			env.send(root0, coder(), `{"op":"send","id":"c1","session":"temp-old","input":"hello"}`)
			env.send(root0, coder(), `{"op":"send","id":"c2","session":"other","input":"x"}`) // current
			// An acknowledged append, in the journal only: temp-old is
			// loaded (other dropped, with one session kept) and unsealed.
			testkit.Must(t, env.e.AppendLog(root0, ref, abi.FileEvents, []byte(`{"type":"note"}`+"\n")))
			testkit.Must(t, env.e.wal.Sync())
			dir := env.sessDir("home/0", "coder", "temp-old")
			events := readFile(t, filepath.Join(dir, abi.FileEvents))
			immutableSeals(t, env.store, dir)
			if how == "eviction closed it" {
				_, release, err := env.e.lookup(layout.Ref{Container: ref.Container, Name: "other"})
				testkit.Must(t, err)
				release()
				if _, ok := env.e.sessions.Peek(ref.Key()); ok {
					t.Fatal("temp-old was not dropped")
				}
			}
			before := env.settledTree()
			testkit.WantErrno(t, "archive", env.e.Archive(ref, layout.PrivateOwner(0, 0), false), syscall.EIO)
			testkit.WantErrno(t, "archive again", env.e.Archive(ref, layout.PrivateOwner(0, 0), false), syscall.EIO)
			testkit.WantErrno(t, "gc's preview", env.e.checkArchive(ref), syscall.EIO)
			testkit.Same(t, "a refused archive", before, testkit.Snapshot(t, env.store, nil))

			env.e.Close()
			mutableSeals(t, dir)
			env.open()
			if got := readFile(t, filepath.Join(dir, abi.FileEvents)); got != events {
				t.Fatalf("events after the restart: %q, want %q", got, events)
			}
			var problems []string
			_, err := fsck.Check(env.store, false, false, fsck.Report{Problem: func(p, what string) { problems = append(problems, p+": "+what) }})
			testkit.Must(t, err)
			if len(problems) > 0 {
				t.Fatalf("fsck after the restart:\n%s", strings.Join(problems, "\n"))
			}
			env.send(root0, coder(), `{"op":"send","id":"c3","session":"temp-old","input":"again"}`)
		})
	}
}

// immutableSeals makes the seals of the session at dir immutable (chattr
// +i): a write through a descriptor already open fails (EPERM). The
// store's flags are cleared at the end wherever the seals went, so that
// it can be removed.
func immutableSeals(t *testing.T, store, dir string) {
	t.Helper()
	seals := sealFiles(t, dir)
	if os.Geteuid() != 0 {
		t.Skip("needs root (chattr +i)")
	}
	if out, err := exec.Command("chattr", append([]string{"+i"}, seals...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (e2fsprogs, and a filesystem with the flag): %v %s", err, out)
	}
	t.Cleanup(func() { clearImmutable(store) })
}

// clearImmutable clears the immutable flag of every regular file below
// store, one by one: `chattr -R` stops short of some trees (a run of the
// old code, which moved the session with its seals, left an immutable
// seal that t.TempDir could not remove).
func clearImmutable(store string) {
	filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			exec.Command("chattr", "-i", p).Run()
		}
		return nil
	})
}

// mutableSeals undoes immutableSeals.
func mutableSeals(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("chattr", append([]string{"-i"}, sealFiles(t, dir)...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
}

// sealFiles are the seals of the session's logs.
func sealFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range layout.SessionLogs {
		at := layout.LogPlace(nil, nil, "", f, nil)
		out = append(out, filepath.Join(dir, at.Seal))
		if _, err := os.Stat(out[len(out)-1]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
