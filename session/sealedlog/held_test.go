package sealedlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// spoil is what a user who owns their store files may do to their log (or
// its seal) while the journal still holds appends for it; restore puts it
// back as an administrator would (the log's bytes, owned as its seal).
type spoil struct {
	name  string
	do    func(t *testing.T, log, seal string, oldSeal []byte) // oldSeal: the seal before the log's last checkpoint
	words string                                               // in what the start says about the log
}

var spoils = []spoil{
	{"fifo", func(t *testing.T, log, _ string, _ []byte) {
		testkit.Must(t, os.Remove(log))
		testkit.Must(t, syscall.Mkfifo(log, 0o600))
	}, "a FIFO, not a regular file"},
	{"missing", func(t *testing.T, log, _ string, _ []byte) { testkit.Must(t, os.Remove(log)) }, "log file is missing"},
	{"directory", func(t *testing.T, log, _ string, _ []byte) {
		testkit.Must(t, os.Remove(log))
		testkit.Must(t, os.Mkdir(log, 0o700))
	}, "a directory, not a regular file"},
	{"symlink", func(t *testing.T, log, _ string, _ []byte) {
		testkit.Must(t, os.Rename(log, log+".real"))
		testkit.Must(t, os.Symlink(filepath.Base(log)+".real", log))
	}, "a symlink"},
	{"char device", func(t *testing.T, log, _ string, _ []byte) {
		testkit.Must(t, os.Remove(log))
		testkit.Must(t, syscall.Mknod(log, syscall.S_IFCHR|0o600, 1<<8|3)) // /dev/null's numbers
	}, "a character device"},
	{"other owner", func(t *testing.T, log, _ string, _ []byte) { testkit.Must(t, os.Chown(log, 4242, 4242)) }, "owned by uid 4242"},
	{"hard link", func(t *testing.T, log, _ string, _ []byte) { testkit.Must(t, os.Link(log, log+".other")) }, "2 links"},
	{"shorter", func(t *testing.T, log, _ string, _ []byte) { testkit.Must(t, os.Truncate(log, 3)) }, "shorter than"},
	{"different", func(t *testing.T, log, _ string, _ []byte) {
		b := readFile(t, log)
		b[5] ^= 1
		testkit.Must(t, os.WriteFile(log, b, 0o600))
	}, "are not what its seal vouches for"},
	{"damaged seal", func(t *testing.T, _, seal string, _ []byte) {
		testkit.Must(t, os.WriteFile(seal, bytes.Repeat([]byte{0xEE}, 1024), 0o600))
	}, "seal holds no valid record"},
	{"missing seal", func(t *testing.T, _, seal string, _ []byte) { testkit.Must(t, os.Remove(seal)) }, "its seal cannot be read"},
	{"older seal", func(t *testing.T, _, seal string, old []byte) { testkit.Must(t, os.WriteFile(seal, old, 0o600)) }, "an append is missing"},
}

// A log that cannot be recovered at start (a user put a FIFO, a device or
// nothing in its place, or spoiled it or its seal) never stops the start:
// its records are kept aside, the log is left exactly as it is (a FIFO is
// never opened), every other log is replayed, and once the log is put back
// RecoverHeld applies the kept records.
func TestRecoverSetsAsideWhatCannotBeRecovered(t *testing.T) {
	for _, sp := range spoils {
		t.Run(sp.name, func(t *testing.T) {
			js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1})
			oldSeal := readFile(t, filepath.Join(js.dir, "s0/seal"))
			js.logs[0].Append(line(100)) // sealed by the checkpoint below: a prefix the journal builds on
			js.want[0] = append(js.want[0], line(100)...)
			testkit.Must(t, js.logs[0].Close())
			js.logs[0], _ = Open(js.place(0))
			for n := 0; n < 6; n++ {
				js.appendDurable(n%2, n)
			}
			js.crash()
			log, seal := filepath.Join(js.dir, "s0/log"), filepath.Join(js.dir, "s0/seal")
			keptLog, keptSeal := readFile(t, log), readFile(t, seal)
			sp.do(t, log, seal, oldSeal)
			spoiled := lstatAll(t, filepath.Join(js.dir, "s0"))

			j, err := OpenJournal(js.root, jdir, js.locate, JournalConfig{})
			if err != nil {
				t.Fatalf("one spoiled log stopped the start: %v", err)
			}
			testkit.Must(t, j.Close())
			if got := lstatAll(t, filepath.Join(js.dir, "s0")); got != spoiled {
				t.Fatalf("the spoiled log's directory changed:\n%s\nwant\n%s", got, spoiled)
			}
			if !Held(js.root, jdir, js.place(0)) || Held(js.root, jdir, js.place(1)) {
				t.Fatal("log 0 is not held, or log 1 is")
			}
			// The other log is replayed and sealed.
			at1 := js.place(1)
			at1.Journal = nil
			if ps := Verify(at1); len(ps) > 0 || !bytes.Equal(readFile(t, filepath.Join(js.dir, at1.Log)), js.want[1]) {
				t.Fatalf("log 1 after the start: %s", whats(ps))
			}
			held, err := HeldProblems(js.root, jdir, js.locate)
			if err != nil || len(held) != 1 || !strings.Contains(held[0].What, sp.words) || !strings.Contains(held[0].What, "3 appends") {
				t.Fatalf("held problems %v %s, want one saying %q", err, whats(held), sp.words)
			}
			t.Logf("fsck says: %s", whats(held))
			// Repair while the log is still spoiled keeps the records.
			if rep, err := RecoverHeld(js.root, jdir, js.locate); err != nil || len(rep) != 0 {
				t.Fatalf("repair of a spoiled log: %v %s", err, whats(rep))
			}
			if !Held(js.root, jdir, js.place(0)) {
				t.Fatal("a failed repair dropped the kept records")
			}
			// The administrator puts the log and seal back; repair applies.
			restore(t, log, keptLog)
			restore(t, seal, keptSeal)
			rep, err := RecoverHeld(js.root, jdir, js.locate)
			if err != nil || len(rep) != 1 {
				t.Fatalf("repair after the log was put back: %v %s", err, whats(rep))
			}
			if Held(js.root, jdir, js.place(0)) {
				t.Fatal("still held after the repair")
			}
			if left := heldFiles(t, js); len(left) != 0 {
				t.Fatalf("repair left %v", left)
			}
			js.logs = js.logs[:1]
			js.verify()
		})
	}
}

// restore puts back a regular file with b at p, owned and moded as the
// test's files are, whatever is there now.
func restore(t *testing.T, p string, b []byte) {
	t.Helper()
	testkit.Must(t, os.RemoveAll(p))
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	os.Remove(p + ".other")
	os.Remove(p + ".real")
}

// lstatAll describes every entry of dir without following or opening any.
func lstatAll(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	testkit.Must(t, err)
	var b strings.Builder
	for _, e := range ents {
		var st syscall.Stat_t
		p := filepath.Join(dir, e.Name())
		testkit.Must(t, syscall.Lstat(p, &st))
		fmt.Fprintf(&b, "%s %o %d %d %d\n", e.Name(), st.Mode, st.Uid, st.Size, st.Nlink)
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			fmt.Fprintf(&b, "  %x\n", readFile(t, p))
		}
	}
	return b.String()
}

func heldFiles(t *testing.T, js *jstore) []string {
	m, err := filepath.Glob(filepath.Join(js.dir, jdir, heldPrefix+"*"))
	testkit.Must(t, err)
	return m
}
