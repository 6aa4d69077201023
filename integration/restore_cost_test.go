package integration

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/versions"
)

// opensOf counts the opens of the store file p while do runs, by an
// inotify watch: what the server reads of it, whoever asks.
func opensOf(t *testing.T, p string, do func()) int {
	t.Helper()
	return eventsOf(t, p, unix.IN_OPEN, do)
}

// readsOf counts the times the store file p was read while do runs: an
// open's reads, however many, count once (inotify merges an event into
// the same one unread before it).
func readsOf(t *testing.T, p string, do func()) int {
	t.Helper()
	return eventsOf(t, p, unix.IN_ACCESS, do)
}

// eventsOf counts the inotify events of kind (IN_OPEN, IN_ACCESS) on p
// while do runs. Opens and closes are watched whatever kind is counted:
// inotify merges an event into the same one unread before it, so opens
// alone would count as one, and an open's reads are told from the next's.
func eventsOf(t *testing.T, p string, kind uint32, do func()) int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	testkit.Must(t, err)
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, p, kind|unix.IN_OPEN|unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	do()
	n, buf := 0, make([]byte, 64<<10)
	for {
		k, err := unix.Read(fd, buf)
		if err == syscall.EAGAIN {
			return n
		}
		testkit.Must(t, err)
		for off := 0; off < k; {
			// struct inotify_event: wd, mask, cookie, len, then the name.
			if binary.NativeEndian.Uint32(buf[off+4:])&kind != 0 {
				n++
			}
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
}

// TestRestoreReadsIndexOnce: a restore of a run reads the versions index
// once, however many files the run changed. Each chosen file's content
// was read through Content(v), which read, verified and parsed the whole
// index again (up to 4 MiB): quadratic in the index, so a run that changed
// 2,000 files with an index of 4 MiB had one restore take the server tens
// of CPU seconds (7 s and still going after 20 s here), as often as its
// uid asks. Here a run changed 200 files and its last content is damaged:
// the restore reads the 200 contents, is EIO at the last (no run starts),
// and opened the index 201 times; now once or twice (the listing, and the
// check of the session).
func TestRestoreReadsIndexOnce(t *testing.T) {
	const n = 200
	run := "ctx-" + fmt.Sprintf("%032x", 7)
	last := []byte("damaged later\n")
	s := versionedSession(t, func(st *versions.Store) {
		for i := 0; i < n-1; i++ {
			mustKeep(t, st, run, fmt.Sprintf("call_%d", i), fmt.Sprintf("/work/f%d", i), []byte{}, versions.Modify)
		}
		mustKeep(t, st, run, "call_last", "/work/last", last, versions.Modify)
	})
	sdir := filepath.Join(s.store, versionedRel)
	testkit.Must(t, os.WriteFile(filepath.Join(sdir, "versions/sha256/"+sumHex(last)), []byte("DAMAGED LATER\n"), 0o600))
	var frames []frame
	var raw string
	opens := opensOf(t, filepath.Join(sdir, "versions/index.jsonl"), func() {
		var err error
		frames, raw, err = s.requestAs(owner, "coder", fmt.Sprintf(`{"op":"restore","id":"x1","session":"v","run":%q}`, run))
		if err != nil || len(frames) == 0 {
			t.Fatalf("restore: %v %s", err, raw)
		}
	})
	wantCode(t, frames[0], "EIO")
	if opens > 2 {
		t.Errorf("a restore of %d files opened the versions index %d times, want at most 2", n, opens)
	}
}
