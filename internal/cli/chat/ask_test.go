package chat

import (
	"os"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// ttyOnPty is a chat's terminal on a new pseudo-terminal; ptm is the
// person's side.
func ttyOnPty(t *testing.T) (tc *ttyChat, ptm *os.File) {
	t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptm.Close(); pts.Close() })
	orig, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	c := &chat{w: &clienv.Where{Loc: client.Loc{Agent: "coder"}}}
	tc = &ttyChat{chat: c, fd: int(pts.Fd()), orig: *orig, out: pts, keys: &keyReader{r: pts}, ctrlC: make(chan struct{}, 1)}
	go func() { // drain what the chat writes, so that it never blocks
		buf := make([]byte, 1024)
		for {
			if _, err := ptm.Read(buf); err != nil {
				return
			}
		}
	}()
	return tc, ptm
}

type keyResult struct {
	decision string
	ok       bool
}

func readKeyAsync(tc *ttyChat) <-chan keyResult {
	ch := make(chan keyResult, 1)
	go func() {
		d, ok := tc.readKey("? ")
		ch <- keyResult{d, ok}
	}()
	return ch
}

func waitKey(t *testing.T, ch <-chan keyResult) keyResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("readKey did not return")
	}
	return keyResult{}
}

// The approval prompt takes one of a, r, d, s in either case; other keys
// are ignored, and keys typed before the prompt never answer it; Ctrl+C
// is no answer. The terminal is back in its own mode after.
func TestReadKey(t *testing.T) {
	tc, ptm := ttyOnPty(t)
	tc.quiet()
	ptm.WriteString("a\r") // typed ahead while the reply streamed: dropped
	waitQueued(t, tc)
	ch := readKeyAsync(tc)
	waitRaw(t, tc) // the prompt flushed the input before
	ptm.WriteString("xq")
	ptm.WriteString("R")
	if r := waitKey(t, ch); r != (keyResult{"allow_run", true}) {
		t.Fatalf("typed ahead a, then x q R: %+v", r)
	}
	if l := lflag(t, tc); l&unix.ICANON == 0 || l&unix.ECHO != 0 {
		t.Errorf("after the prompt lflag %#x: want the mode a reply streams in (canonical, no echo)", l)
	}
	for _, c := range []struct {
		key  string
		want keyResult
	}{{"a", keyResult{"allow_once", true}}, {"d", keyResult{"deny", true}}, {"S", keyResult{"stop", true}}, {"\x03", keyResult{"", false}}} {
		ch := readKeyAsync(tc)
		waitRaw(t, tc)
		ptm.WriteString(c.key)
		if r := waitKey(t, ch); r != c.want {
			t.Errorf("key %q: %+v, want %+v", c.key, r, c.want)
		}
	}
}

func lflag(t *testing.T, tc *ttyChat) uint32 {
	t.Helper()
	tio, err := unix.IoctlGetTermios(tc.fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag
}

// waitRaw waits until the prompt made the terminal raw.
func waitRaw(t *testing.T, tc *ttyChat) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); lflag(t, tc)&unix.ICANON != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the terminal never became raw")
		}
	}
}

// waitQueued waits until the terminal holds typed input.
func waitQueued(t *testing.T, tc *ttyChat) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, err := unix.IoctlGetInt(tc.fd, unix.TIOCINQ); err == nil && n > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the typed key never arrived")
		}
	}
}
