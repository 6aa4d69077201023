package session

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/archive"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/session/behind"
	"github.com/ctxfs/ctxfs/session/layout"
)

// smallDisk is a store on a tmpfs of its own, which a filler file makes
// full and gives back.
type smallDisk struct {
	*testEnv
	mnt, filler string
}

// newSmallDisk opens an engine whose store is on a tmpfs of size bytes,
// keeping at most maxSessions sessions loaded.
func newSmallDisk(t *testing.T, size int64, maxSessions int) *smallDisk {
	t.Helper()
	base := t.TempDir()
	mnt := filepath.Join(base, "small")
	testkit.Must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		// Only root mounts a tmpfs; CI runs as root and must not skip.
		if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
			t.Fatalf("mount tmpfs: %v\n%s", err, out)
		}
		t.Skipf("mount tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() }) // after the engine closes (cleanups run last first)
	env := &testEnv{t: t, store: filepath.Join(mnt, "store"), root: filepath.Join(base, "root"), maxSessions: maxSessions}
	env.define("coder", map[string]string{"model": "debug/echo"})
	env.open()
	return &smallDisk{testEnv: env, mnt: mnt, filler: filepath.Join(mnt, "filler")}
}

// fill takes every block left (a file that is not the store's).
func (d *smallDisk) fill() {
	d.t.Helper()
	f, err := os.OpenFile(d.filler, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	testkit.Must(d.t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				d.t.Fatal(err)
			}
			buf = buf[:len(buf)/2]
		}
	}
}

// room gives the filler's blocks back.
func (d *smallDisk) room() { testkit.Must(d.t, os.Remove(d.filler)) }

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	testkit.Must(t, err)
	return len(ents)
}

// sendsOnFullDisk makes sessions s0…s<n-1> (loading at most bound at
// once), then fills the disk and sends "full <i>" to each: every send is
// recorded (the journal has room written ahead) but no derived file can
// be written (their spare twins are gone, so each needs a new block). It
// checks after every send that the sessions loaded and the descriptors
// open stay within the bound. tune, if not nil, changes the engine's
// bounds of loose values first.
func sendsOnFullDisk(t *testing.T, bound, n int, tune func(*behind.Queue)) *smallDisk {
	t.Helper()
	d := newSmallDisk(t, 16<<20, bound)
	for i := 0; i < n; i++ {
		d.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"a%d","session":"s%d","input":"hi"}`, i, i))
	}
	d.e.Close()
	// Without their spare twins every derived file needs a block of its
	// own to be written: on the full disk none can be, while the logs'
	// appends go into the journal's room, written ahead.
	spares, _ := filepath.Glob(filepath.Join(d.store, "home/0/agent/coder/session/s*/.*.spare"))
	for _, p := range spares {
		testkit.Must(t, os.Remove(p))
	}
	d.open()
	if tune != nil {
		tune(d.e.derived)
	}
	d.send(root0, coder(), `{"op":"send","id":"w","session":"warm","input":"warm"}`) // the journal's room
	fds := openFDs(t)
	d.fill()
	for i := 0; i < n; i++ {
		frames, err := d.do(root0, coder(), fmt.Sprintf(`{"op":"send","id":"b%d","session":"s%d","input":"full %d"}`, i, i, i))
		if err != nil || frames[len(frames)-1].Str("status") != "ok" {
			t.Fatalf("send %d on the full disk: %v %v", i, err, types(frames))
		}
		if got := d.e.sessions.Len(); got > bound {
			t.Fatalf("after %d sends on a full disk, %d sessions loaded; the bound is %d", i+1, got, bound)
		}
		if got := openFDs(t); got > fds+bound*quota.FDsPerSession {
			t.Fatalf("after %d sends on a full disk, %d descriptors open, %d before", i+1, got, fds)
		}
	}
	return d
}

// sessRel is the store path of session s<i>.
func sessRel(i int) string { return fmt.Sprintf("home/0/agent/coder/session/s%d", i) }

// wantServed checks what the engine serves for session i's derived files.
func (d *smallDisk) wantServed(i int, state, latest string) {
	d.t.Helper()
	for f, want := range map[string]string{abi.FileState: state, abi.FileLatest: latest} {
		v, err := d.e.Value(sessRel(i) + "/" + f)
		if err != nil || string(v.Data) != want {
			d.t.Errorf("s%d/%s served %q (%v), want %q", i, f, v.Data, err, want)
		}
	}
}

// wantStored waits (a few passes of behind) until session i's derived
// files in the store are state and latest.
func (d *smallDisk) wantStored(i int, state, latest string) {
	d.t.Helper()
	dir := filepath.Join(d.store, sessRel(i))
	read := func(f string) string { b, _ := os.ReadFile(filepath.Join(dir, f)); return string(b) }
	for deadline := time.Now().Add(10 * behind.Every); read(abi.FileState) != state || read(abi.FileLatest) != latest; {
		if time.Now().After(deadline) {
			d.t.Fatalf("s%d: state %q, latest.md %q in the store; want %q, %q", i, read(abi.FileState), read(abi.FileLatest), state, latest)
		}
		time.Sleep(behind.Every / 5)
	}
}

// checkBehind checks the queue's bookkeeping (behind.Queue.Check) and
// returns how many values wait loose.
func checkBehind(t *testing.T, q *behind.Queue) (loose int) {
	t.Helper()
	if err := q.Check(); err != nil {
		t.Error(err)
	}
	return q.Counts("").Loose
}

// waiting is how many values wait to be written.
func behindWaiting(q *behind.Queue) int { return q.Counts("").Waiting }

// TestFullDiskKeepsTheSessionBound: on a full disk, sends to many more
// sessions than the engine keeps loaded leave their derived files'
// values unwritten (for want of room), yet every session leaves the
// cache as it would otherwise: the sessions loaded and the descriptors
// open stay within the bound (sendsOnFullDisk). Each value is still
// served after its session left, and lands in the store, byte for byte
// and with the attributes it was served with, once there is room again.
func TestFullDiskKeepsTheSessionBound(t *testing.T) {
	const n = 40
	d := sendsOnFullDisk(t, 4, n, nil)
	served := map[int]Value{}
	for i := 0; i < n; i++ {
		d.wantServed(i, "done\n", fmt.Sprintf("full %d\n", i))
		served[i], _ = d.e.Value(sessRel(i) + "/" + abi.FileLatest)
		if got := readFile(t, filepath.Join(d.store, sessRel(i), abi.FileLatest)); got != "hi\n" {
			t.Fatalf("s%d/latest.md is %q in the store on the full disk", i, got)
		}
	}
	if loose := checkBehind(t, d.e.derived); loose < 2*(n-4) {
		t.Fatalf("%d values wait for sessions not loaded; want those of %d sessions", loose, n-4)
	}
	d.room()
	for i := 0; i < n; i++ {
		d.wantStored(i, "done\n", fmt.Sprintf("full %d\n", i))
		var st unix.Stat_t
		testkit.Must(t, unix.Lstat(filepath.Join(d.store, sessRel(i), abi.FileLatest), &st))
		if v := served[i]; st.Mtim != v.Stat.Mtim || st.Mode != v.Stat.Mode || st.Uid != v.Stat.Uid {
			t.Errorf("s%d/latest.md: mode %o, uid %d, mtime %v in the store; served %o, %d, %v", i, st.Mode, st.Uid, st.Mtim, v.Stat.Mode, v.Stat.Uid, v.Stat.Mtim)
		}
	}
	if loose, n := checkBehind(t, d.e.derived), behindWaiting(d.e.derived); loose != 0 || n != 0 {
		t.Errorf("%d values (%d loose) still wait once there is room", n, loose)
	}
}

// TestLooseValuesAreBounded: the failed values of sessions not loaded are
// bounded, by count and by bytes; beyond, the oldest are forgotten, and
// the store's file is served again until the session loads, which
// derives the value again from the logs (reconcile).
func TestLooseValuesAreBounded(t *testing.T) {
	for _, c := range []struct {
		what string
		tune func(*behind.Queue)
	}{
		{"count", func(q *behind.Queue) { q.SetBound(5, behind.MaxLooseBytes) }},
		{"bytes", func(q *behind.Queue) { q.SetBound(behind.MaxLoose, 20) }},
	} {
		t.Run(c.what, func(t *testing.T) {
			const n = 12
			d := sendsOnFullDisk(t, 2, n, c.tune)
			loose := checkBehind(t, d.e.derived)
			looseBytes := d.e.derived.Counts("").LooseBytes
			if loose == 0 || loose > 5 || looseBytes > 20 && c.what == "bytes" {
				t.Fatalf("%d values, %d bytes kept for sessions not loaded", loose, looseBytes)
			}
			d.wantServed(0, "done\n", "hi\n") // the oldest: forgotten, the store's file as it is
			d.wantServed(n-1, "done\n", fmt.Sprintf("full %d\n", n-1))
			d.room()
			for i := 0; i < n; i++ {
				_, release, err := d.e.lookup(layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: fmt.Sprintf("s%d", i)})
				testkit.Must(t, err)
				release()
				d.wantStored(i, "done\n", fmt.Sprintf("full %d\n", i))
			}
		})
	}
}

// ref is session s<i>'s Ref.
func ref(i int) layout.Ref {
	return layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: fmt.Sprintf("s%d", i)}
}

// TestReloadWithFailedValue: a session loaded again while its failed
// value waits takes the value back (it is not loose, so never forgotten
// while loaded), keeps one value a file, serves it, and writes it once
// there is room, while loaded; after it leaves again, a new failed value
// waits loose again.
func TestReloadWithFailedValue(t *testing.T) {
	d := sendsOnFullDisk(t, 2, 6, nil)
	s, release, err := d.e.lookup(ref(0))
	testkit.Must(t, err)
	checkBehind(t, d.e.derived)
	if c := d.e.derived.Counts(s.rel); c.Waiting == 0 {
		t.Fatal("reloaded: no value waits for s0")
	} else if c.Loose != 0 {
		t.Errorf("%d values of s0 are loose while it is loaded", c.Loose)
	}
	d.wantServed(0, "done\n", "full 0\n")
	d.room()
	d.wantStored(0, "done\n", "full 0\n") // written while loaded (loadcache.Cache.Hold)
	release()
	if d.e.derived.Waits(s.rel) {
		t.Error("a value of s0 still waits once written")
	}
}

// TestArchiveAndDeleteWithFailedValues: an archive of a session whose
// failed value waits is EBUSY and changes nothing (the archive would keep
// the older file); once there is room it archives the value written. A
// delete forgets the values: nothing is written into the directory after,
// it is never made again for them, and a new session of the name gets
// none of them. A session directory removed behind the engine's back
// takes no value either.
func TestArchiveAndDeleteWithFailedValues(t *testing.T) {
	d := sendsOnFullDisk(t, 2, 6, nil)
	own := layout.PrivateOwner(0, 0)
	// Spare twins are every write's scratch: each try of the failed
	// values (every pass) changes them.
	home := filepath.Join(d.store, "home/0")
	noSpare := func(rel string) bool { return strings.HasSuffix(rel, ".spare") }
	before := testkit.Snapshot(t, home, noSpare)
	testkit.WantErrno(t, "archive with a failed value", d.e.Archive(ref(1), own, false), syscall.EBUSY)
	testkit.WantErrno(t, "check with a failed value", d.e.checkArchive(ref(1)), syscall.EBUSY)
	testkit.Same(t, "a refused archive", before, testkit.Snapshot(t, home, noSpare))
	d.wantServed(1, "done\n", "full 1\n")

	testkit.Must(t, d.e.Archive(ref(2), own, true))
	if d.e.derived.Waits(sessRel(2)) {
		t.Fatal("a deleted session's values still wait")
	}
	if _, err := d.e.Value(sessRel(2) + "/" + abi.FileLatest); err == nil {
		t.Error("a deleted session's value is still served")
	}
	testkit.Must(t, os.RemoveAll(filepath.Join(d.store, sessRel(3)))) // behind the engine's back
	d.room()
	d.wantStored(1, "done\n", "full 1\n")
	for _, i := range []int{2, 3} {
		deadline := time.Now().Add(4 * behind.Every)
		for d.e.derived.Waits(sessRel(i)) && time.Now().Before(deadline) {
			time.Sleep(behind.Every / 5)
		}
		if _, err := os.Lstat(filepath.Join(d.store, sessRel(i))); !errors.Is(err, os.ErrNotExist) || d.e.derived.Waits(sessRel(i)) {
			t.Fatalf("s%d: removed, then %v; values waiting %v", i, err, d.e.derived.Waits(sessRel(i)))
		}
	}
	d.send(root0, coder(), `{"op":"send","id":"n2","session":"s2","input":"anew"}`)
	time.Sleep(2 * behind.Every)
	d.wantStored(2, "done\n", "anew\n")
	testkit.Must(t, d.e.Archive(ref(1), own, false))
	if got := readFile(t, filepath.Join(d.store, archive.Target(ref(1)), abi.FileLatest)); got != "full 1\n" {
		t.Errorf("archived latest.md %q", got)
	}
}
