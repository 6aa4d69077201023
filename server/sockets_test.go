package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
)

// TestSocketOverSymlink: a symlink planted where an agent's socket goes,
// pointing at a 0600 file, is replaced by the socket, never followed: the
// file keeps its mode and bytes (the old os.Chmod(sock, 0666) made it
// 0666), and the socket answers with mode 0666.
func TestSocketOverSymlink(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent", "coder.d"), 0o755))
	target := filepath.Join(base, "secret")
	secret := []byte("root's secret\n")
	testkit.Must(t, os.WriteFile(target, secret, 0o600))
	sock := filepath.Join(root, "agent", "coder.sock")
	testkit.Must(t, os.Symlink(target, sock))

	serveRoot(t, root, store)

	st, err := os.Lstat(target)
	testkit.Must(t, err)
	if got, _ := os.ReadFile(target); st.Mode() != 0o600 || !bytes.Equal(got, secret) {
		t.Fatalf("the symlink's target changed: mode %v, bytes %q", st.Mode(), got)
	}
	st, err = os.Lstat(sock)
	testkit.Must(t, err)
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o666 {
		t.Fatalf("%s: mode %v, want a 0666 socket", sock, st.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	frames, err := client.Call(ctx, sock, proto.NewObject("op", proto.OpPing))
	if err != nil || len(frames) != 1 || frames[0].Type() != proto.FramePong {
		t.Fatalf("ping: %v %v", frames, err)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "agent", ".s*")); len(left) != 0 {
		t.Fatalf("private bind directories left behind: %v", left)
	}
}

// serveRoot serves root's sockets with an engine on store, both closed
// when the test ends.
func serveRoot(t *testing.T, root, store string) *Sockets {
	t.Helper()
	e, err := session.Open(session.Config{Store: store, Root: root})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })
	socks, err := ServeSockets(e, root, nil)
	testkit.Must(t, err)
	t.Cleanup(socks.Close)
	return socks
}

// within fails the test unless ok holds within limit.
func within(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSocketSymlinkRace: while the server makes the sockets of many
// agents, a planter swaps a symlink to a 0600 file onto each socket the
// moment it appears (the window between bind and the old path chmod). The
// file keeps its mode whatever the planter wins.
func TestSocketSymlinkRace(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	const agents = 300
	names := make([]string, agents)
	for i := range names {
		names[i] = fmt.Sprintf("a%03d", i) // the order scan makes them in
		testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent", names[i]+".d"), 0o755))
	}
	target := filepath.Join(base, "secret")
	testkit.Must(t, os.WriteFile(target, []byte("x"), 0o600))
	e, err := session.Open(session.Config{Store: store, Root: root})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })

	stop := make(chan struct{})
	planted := make(chan int)
	go func() { planted <- plantOnSockets(root, names, target, stop) }()
	socks, err := ServeSockets(e, root, nil)
	close(stop)
	n := <-planted
	if err == nil {
		socks.Close()
	}
	st, err := os.Stat(target)
	testkit.Must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the symlink's target became mode %v (%d symlinks planted)", st.Mode(), n)
	}
	t.Logf("%d symlinks planted onto fresh sockets", n)
}

// plantOnSockets waits for each agent's socket in turn and renames a
// symlink to target onto it as soon as it is there; it returns how many
// it planted.
func plantOnSockets(root string, names []string, target string, stop <-chan struct{}) int {
	link := filepath.Join(filepath.Dir(target), "link")
	n := 0
	for _, name := range names {
		sock := filepath.Join(root, "agent", name+".sock")
		for {
			select {
			case <-stop:
				return n
			default:
			}
			if st, err := os.Lstat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
				break
			}
		}
		os.Symlink(target, link)
		if os.Rename(link, sock) == nil {
			n++
		}
	}
	return n
}

// TestWatchedDirsBounded: with more providers than maxWatchedDirs, the
// kernel holds exactly maxWatchedDirs watches of the server's, and a
// model defined in a provider past the bound still gets its socket, from
// the periodic rescan; one in a watched provider gets it from inotify.
func TestWatchedDirsBounded(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	for i := range maxWatchedDirs + 5 { // ROOT/agent and ROOT/model are watched first
		testkit.Must(t, os.MkdirAll(filepath.Join(root, "model", fmt.Sprintf("p%04d", i)), 0o755))
	}
	socks := serveRoot(t, root, store)
	if socks.defs == nil {
		t.Skip("no inotify here")
	}
	fdinfo, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", socks.defs.fd))
	testkit.Must(t, err)
	if n := bytes.Count(fdinfo, []byte("inotify wd:")); n != maxWatchedDirs {
		t.Errorf("%d directories watched, want %d", n, maxWatchedDirs)
	}
	for _, p := range []string{"p0000", fmt.Sprintf("p%04d", maxWatchedDirs+4)} {
		testkit.Must(t, os.Mkdir(filepath.Join(root, "model", p, "m.d"), 0o755))
		sock := filepath.Join(root, "model", p, "m.sock")
		within(t, 3*rescanPeriod, "a socket at "+sock, func() bool { return isSocket(sock) })
	}
}

func isSocket(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().Type() == os.ModeSocket
}

// TestSocketsFollowBurst: a burst of definitions made and removed (events
// coalesce into few rescans) ends with exactly one socket per definition
// left, and no bind directory left behind.
func TestSocketsFollowBurst(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent"), 0o755))
	serveRoot(t, root, store)
	const n = 200
	for i := range n {
		testkit.Must(t, os.Mkdir(filepath.Join(root, "agent", fmt.Sprintf("b%03d.d", i)), 0o755))
	}
	for i := 0; i < n; i += 2 {
		testkit.Must(t, os.Remove(filepath.Join(root, "agent", fmt.Sprintf("b%03d.d", i))))
	}
	want := func() bool {
		for i := range n {
			if isSocket(filepath.Join(root, "agent", fmt.Sprintf("b%03d.sock", i))) != (i%2 == 1) {
				return false
			}
		}
		left, _ := filepath.Glob(filepath.Join(root, "agent", ".s*"))
		return len(left) == 0
	}
	within(t, 3*rescanPeriod, "one socket per definition left", want)
}

// TestRemovesOnlyItsOwnSocket: when a definition goes, its socket is
// removed only if the path still leads to the socket made for it. Here a
// provider's symlink is pointed at another directory whose m.sock is
// someone else's: that socket stays, and so does its content.
func TestRemovesOnlyItsOwnSocket(t *testing.T) {
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	first, other := filepath.Join(base, "first"), filepath.Join(base, "other")
	testkit.Must(t, os.MkdirAll(filepath.Join(first, "m.d"), 0o755))
	testkit.Must(t, os.MkdirAll(other, 0o755))
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "model"), 0o755))
	link := filepath.Join(root, "model", "linked")
	testkit.Must(t, os.Symlink(first, link))
	theirs := filepath.Join(other, "m.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: theirs, Net: "unix"})
	testkit.Must(t, err)
	defer l.Close()
	serveRoot(t, root, store)
	sock := filepath.Join(link, "m.sock")
	within(t, 3*rescanPeriod, "a socket for linked/m", func() bool { return isSocket(sock) })

	testkit.Must(t, os.Remove(link))
	testkit.Must(t, os.Symlink(other, link)) // linked/m.d is gone: other has no m.d
	within(t, 3*rescanPeriod, "the socket made in "+first+" closed", func() bool {
		c, err := net.Dial("unix", filepath.Join(first, "m.sock"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if !isSocket(theirs) {
		t.Fatalf("%s, someone else's socket, was removed", theirs)
	}
}
