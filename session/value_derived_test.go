package session

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
)

// sendNoFlush is a send that leaves the derived values as the engine
// left them (env.do writes them to the store).
func (env *testEnv) sendNoFlush(line string) {
	env.t.Helper()
	if _, err := drain(env.begin(root0, coder(), line)); err != nil {
		env.t.Fatal(err)
	}
}

// TestDerivedValuesServedBeforeWritten: right after a send, before the
// derived files reach the store, the engine serves their new values with
// the attributes their store files then have (owner, mode, size, mtime),
// through every door the mount uses (Value, Stat, Lookup, ReadFile) and
// the rules' own reads (readValue).
func TestDerivedValuesServedBeforeWritten(t *testing.T) {
	env := newEnv(t)
	env.sendNoFlush(`{"op":"send","id":"c1","input":"hello"}`)
	rel := "home/0/agent/coder/session/default"
	want := map[string]string{abi.FileState: "done\n", abi.FileLatest: "hello\n"}
	served := map[string]unix.Stat_t{}
	for f, w := range want {
		v, err := env.e.Value(rel + "/" + f)
		testkit.Must(t, err)
		st, err := env.e.Stat(rel + "/" + f)
		testkit.Must(t, err)
		n, err := env.e.Lookup(0, rel+"/"+f)
		testkit.Must(t, err)
		b, err := env.e.ReadFile(rel+"/"+f, 1<<20)
		testkit.Must(t, err)
		if string(v.Data) != w || string(b) != w || v.Stat.Size != int64(len(w)) || st.Size != int64(len(w)) || n.Stat.Size != int64(len(w)) {
			t.Errorf("%s: Value %q (size %d), ReadFile %q, Stat size %d, Lookup size %d; want %q", f, v.Data, v.Stat.Size, b, st.Size, n.Stat.Size, w)
		}
		served[f] = *st
	}
	if s, err := env.e.readValue(rel + "/" + abi.FileState); err != nil || s != abi.StateDone {
		t.Errorf("readValue(state) = %q, %v", s, err)
	}
	env.e.derived.Flush("", false)
	for f, w := range want {
		var st unix.Stat_t
		testkit.Must(t, unix.Lstat(filepath.Join(env.store, rel, f), &st))
		got := served[f]
		if readFile(t, filepath.Join(env.store, rel, f)) != w || st.Size != got.Size || st.Mode != got.Mode ||
			st.Uid != got.Uid || st.Gid != got.Gid || st.Mtim != got.Mtim {
			t.Errorf("%s: the store file (mode %o, %d:%d, size %d, mtime %v) is not what was served (mode %o, %d:%d, size %d, mtime %v)",
				f, st.Mode, st.Uid, st.Gid, st.Size, st.Mtim, got.Mode, got.Uid, got.Gid, got.Size, got.Mtim)
		}
	}
}

// TestDerivedValuesWrittenBeforeMoveAndStop: an archive right after a
// send moves the session with its derived files as the logs say, and a
// stop writes what waits before the server goes; a touch of a value's
// times applies to the value as it is.
func TestDerivedValuesWrittenBeforeMoveAndStop(t *testing.T) {
	env := newEnv(t)
	env.sendNoFlush(`{"op":"send","id":"c1","session":"s1","input":"one"}`)
	env.sendNoFlush(`{"op":"send","id":"c2","session":"s2","input":"two"}`) // s2 is current now
	s1 := layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: "s1"}
	testkit.Must(t, env.e.Archive(s1, layout.PrivateOwner(0, 0), false))
	archived := filepath.Join(env.store, archive.Target(s1))
	if got := readFile(t, filepath.Join(archived, "state")); got != "done\n" {
		t.Errorf("archived state %q", got)
	}
	if got := readFile(t, filepath.Join(archived, "latest.md")); got != "one\n" {
		t.Errorf("archived latest.md %q", got)
	}

	env.sendNoFlush(`{"op":"send","id":"c3","session":"s2","input":"three"}`)
	s2 := env.sessDir("home/0", "coder", "s2")
	mtime := unix.NsecToTimespec(1234567890123456789)
	rel := "home/0/agent/coder/session/s2/" + abi.FileState
	testkit.Must(t, env.e.Setattr(root0, rel, SetAttr{Times: &[2]unix.Timespec{mtime, mtime}}))
	v, err := env.e.Value(rel)
	testkit.Must(t, err)
	if string(v.Data) != "done\n" || v.Stat.Mtim != mtime {
		t.Errorf("after a touch: %q, mtime %v, want done and %v", v.Data, v.Stat.Mtim, mtime)
	}

	env.sendNoFlush(`{"op":"send","id":"c4","session":"s2","input":"four"}`)
	env.e.Close()
	for f, w := range map[string]string{"state": "done\n", "latest.md": "four\n"} {
		if got := readFile(t, filepath.Join(s2, f)); got != w {
			t.Errorf("after a stop: %s = %q, want %q", f, got, w)
		}
	}
	env.open()
}

// TestUpdatedAtFollowsTheLogsAtLoad: an updated_at that lags the logs
// (a crash before it was written) is brought up to the newest line's
// time when the session loads.
func TestUpdatedAtFollowsTheLogsAtLoad(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"one"}`)
	env.e.Close()
	p := filepath.Join(env.sessDir("home/0", "coder", "default"), "updated_at")
	testkit.Must(t, os.WriteFile(p, []byte("1000\n"), 0o600))
	env.open()
	env.send(root0, coder(), `{"op":"status"}`) // loads the session
	if got := env.stored(p); got == "1000\n" {
		t.Errorf("updated_at still %q after the load", got)
	}
}

// TestDerivedValueAfterFailedWrite: a value whose write failed for want of
// room is still served (it is what the logs say); one that failed
// otherwise (something planted, an I/O error) is not, and the store's
// file is served as it is. Both wait to be written again.
func TestDerivedValueAfterFailedWrite(t *testing.T) {
	env := newEnv(t)
	env.sendNoFlush(`{"op":"send","id":"c1","input":"hello"}`)
	ref := coderDefault()
	s, release, err := env.e.lookup(ref)
	testkit.Must(t, err)
	defer release()
	rel := s.file(abi.FileLatest)
	for _, c := range []struct {
		err    error
		served bool
	}{
		{unix.ENOSPC, true}, {unix.EDQUOT, true}, {unix.EMFILE, true}, {unix.ENFILE, true}, {unix.ENOMEM, true},
		{unix.EIO, false}, {unix.ELOOP, false}, {unix.EISDIR, false},
	} {
		s.fileMu.Lock()
		s.putDerived(abi.FileLatest, []byte("pending\n"), &os.PathError{Op: "write", Path: "x", Err: c.err})
		s.fileMu.Unlock()
		v, ok := env.e.derived.Value(rel)
		if ok != c.served || ok && string(v.Data) != "pending\n" {
			t.Errorf("after %v: served %v %q, want served %v", c.err, ok, v.Data, c.served)
		}
		if !env.e.derived.Waits(s.rel) {
			t.Errorf("after %v: the value does not wait to be written again", c.err)
		}
	}
	env.e.derived.Flush(s.rel, true) // the store has room: the last value lands
	if env.e.derived.Waits(s.rel) || readFile(t, filepath.Join(env.store, rel)) != "pending\n" {
		t.Error("a failed value was not written again once it could be")
	}
}
