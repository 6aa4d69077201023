package session

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/filestamp"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// metaEnv is an engine with root's session "default" of coder, and that
// session held for the test.
func metaEnv(t *testing.T) (*testEnv, *sess, string) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hi"}`)
	s, release, err := env.e.lookup(coderDefault())
	testkit.Must(t, err)
	t.Cleanup(release)
	return env, s, filepath.Join(env.store, s.file(abi.FileMeta))
}

// stampOf is the stamp of the store's file p.
func stampOf(t *testing.T, p string) filestamp.Stamp {
	t.Helper()
	var st unix.Stat_t
	testkit.Must(t, unix.Lstat(p, &st))
	return filestamp.Of(&st)
}

// TestMetaKeptFollowsTheStore: the rule a run reads from meta.json is the
// store's at every read, whether the engine replaced the file, root
// rewrote it in place (longer, or of the same length) or removed it; a
// parse is kept only for the very file it was read from.
func TestMetaKeptFollowsTheStore(t *testing.T) {
	defer func(d time.Duration) { metaRacy = d }(metaRacy)
	metaRacy = 0 // keep every read; TestMetaRacyNotKept has the window
	env, s, p := metaEnv(t)
	read := func(what, want string) {
		t.Helper()
		if got := s.metaString("rule"); got != want {
			t.Fatalf("%s: the rule read %q, want %q", what, got, want)
		}
		if want == "" {
			return
		}
		if obj, ok := s.meta.Get(stampOf(t, p)); !ok || obj.Str("rule") != want {
			t.Fatalf("%s: the parse read is not kept", what)
		}
	}
	testkit.Must(t, env.e.WriteFile(root0, coderDefault(), abi.FileMeta, []byte(`{"client":"ctx","scope":"private","rule":"one"}`)))
	read("the engine's write", "one")
	read("read again", "one")
	inPlace := func(v string) {
		time.Sleep(20 * time.Millisecond) // past a tick of the filesystem's clock: the ctime moves
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		testkit.Must(t, err)
		_, err = f.WriteString(v)
		testkit.Must(t, err)
		testkit.Must(t, f.Close())
	}
	inPlace(`{"client":"ctx","scope":"private","rule":"longer"}`)
	read("root's longer rewrite in place", "longer")
	inPlace(`{"client":"ctx","scope":"private","rule":"LONGER"}`)
	read("root's rewrite in place of the same length", "LONGER")
	testkit.Must(t, os.Remove(p))
	read("the file removed", "")
	if s.meta.Len() != 0 {
		t.Fatal("a parse is kept for a file that is gone")
	}
}

// TestMetaRacyNotKept: a meta.json changed within metaRacy of its read is
// not kept (the filesystem's clock may not move for the next change), so
// a rewrite of the same length at once is read.
func TestMetaRacyNotKept(t *testing.T) {
	env, s, p := metaEnv(t)
	testkit.Must(t, env.e.WriteFile(root0, coderDefault(), abi.FileMeta, []byte(`{"client":"ctx","scope":"private","rule":"one"}`)))
	if got := s.metaString("rule"); got != "one" || s.meta.Len() != 0 {
		t.Fatalf("the rule read %q, kept %d; want one, not kept", got, s.meta.Len())
	}
	testkit.Must(t, os.WriteFile(p, []byte(`{"client":"ctx","scope":"private","rule":"two"}`), 0))
	if got := s.metaString("rule"); got != "two" {
		t.Fatalf("after a rewrite of the same length at once the rule read %q, want two", got)
	}
}

// BenchmarkMetaRule: a run's read of meta.json's rule, kept (the file
// unchanged since) against read and parsed afresh.
func BenchmarkMetaRule(b *testing.B) {
	defer func(d time.Duration) { metaRacy = d }(metaRacy)
	metaRacy = 0
	env := newEnvTB(b)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hi"}`)
	s, release, err := env.e.lookup(coderDefault())
	testkit.Must(b, err)
	defer release()
	testkit.Must(b, env.e.WriteFile(root0, coderDefault(), abi.FileMeta, []byte(`{"client":"ctx","scope":"private","rule":"Answer in French."}`)))
	b.Run("kept", func(b *testing.B) {
		for range b.N {
			if s.metaString("rule") == "" {
				b.Fatal("no rule")
			}
		}
	})
	b.Run("afresh", func(b *testing.B) {
		for range b.N {
			if obj, err := s.metaObject(); err != nil || obj.Str("rule") == "" {
				b.Fatal("no rule", err)
			}
		}
	})
}
