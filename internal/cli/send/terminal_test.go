package send

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// On a terminal, the text a reply carries (a model's deltas and message,
// a run's error message) reaches it with no control character but
// newline and tab: a model cannot write the clipboard (OSC 52), clear
// the screen, hide or rewrite lines (a forged approval prompt) through
// ctx. The text itself stays.
func TestTerminalGetsNoControls(t *testing.T) {
	ptm, pts, err := pty.Open()
	testkit.Must(t, err)
	defer ptm.Close()
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(ptm); got <- b }()
	p := NewSendPrinter(pts, pts, false, nil)
	reply := start +
		`{"type":"delta","run":"R","text":"hi \u001b]52;c;ZWNobyBwd25lZA==\u0007\u001b[2J\u001b[H\r"}` + "\n" +
		`{"type":"delta","run":"R","text":"\u009b8m and \u00e9 ok\n"}` + "\n" +
		`{"type":"error","run":"R","code":"EIO","message":"x \u001b]52;c;ZXZpbA==\u0007"}` + "\n" + doneOK
	fr := client.NewFrameReader(strings.NewReader(reply))
	for f, err := fr.Next(); err == nil; f, err = fr.Next() {
		p.Frame(f)
	}
	p.Finish()
	pts.Close()
	out := <-got
	if i := bytes.IndexFunc(out, func(r rune) bool { return r == 0x1b || r == 0x07 || r == 0x9b }); i >= 0 {
		t.Fatalf("the terminal got a control character at %d: %q", i, out)
	}
	for _, want := range []string{"hi ", "52;c;ZWNobyBwd25lZA==", "and é ok", "ctx: error:"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the terminal lacks %q: %q", want, out)
		}
	}
}

// A pipe gets the bytes as they came.
func TestPipeGetsTheBytes(t *testing.T) {
	out, _, _ := printFrames(t, start+`{"type":"delta","run":"R","text":"a\u001b[2Jb"}`+"\n"+doneOK, false, nil)
	if out != "a\x1b[2Jb\n" && out != "a\x1b[2Jb" {
		t.Fatalf("a pipe got %q", out)
	}
}
