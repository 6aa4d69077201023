package clienv

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
)

// TestExchangeIdle: idle is called each time the exchange is about to
// wait for the server, after every frame that arrived was handled, and
// never between frames that arrived together: a command flushing its
// output there shows each frame before the server's next one.
func TestExchangeIdle(t *testing.T) {
	w := &Where{Loc: client.Loc{Root: t.TempDir(), Uid: os.Getuid(), Agent: "coder"}}
	sock := w.Loc.Socket()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	next := make(chan struct{}) // the client was idle after a frame: send the next
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Read(make([]byte, 4096)) // the request
		c.Write([]byte(`{"type":"m1"}` + "\n" + `{"type":"m2"}` + "\n"))
		select {
		case <-next:
		case <-time.After(10 * time.Second):
			return // the client never said it was idle: the test fails below
		}
		c.Write([]byte(`{"type":"searched"}` + "\n"))
	}()
	var events []string
	idle := func() {
		events = append(events, "idle")
		if len(events) > 1 && events[len(events)-2] == "m2" {
			close(next)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, readErr, dialErr := ExchangeIdle(ctx, w, proto.NewObject("op", "search"), func(f client.Frame) {
		events = append(events, f.Type())
	}, idle)
	if dialErr != nil || readErr != nil {
		t.Fatalf("exchange: %v %v", dialErr, readErr)
	}
	if got := strings.Join(events, " "); got != "idle m1 m2 idle searched idle" {
		t.Fatalf("events %q, want idle before each wait and none between frames that came together", got)
	}
}
