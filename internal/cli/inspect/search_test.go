package inspect

import (
	"bytes"
	"testing"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
)

func TestSearchTerminalRows(t *testing.T) {
	var out bytes.Buffer
	p := &searchPrinter{out: &out, tty: true, q: search.NewQuery("文件")}
	for _, l := range []string{
		`{"type":"match","session":"a-long-session","run":"R1","role":"user","text":"文件 and 文件"}`,
		`{"type":"match","session":"s","run":"R2","role":"assistant","text":"no \u001b[31m"}`,
	} {
		o, err := proto.ParseObject([]byte(l), false)
		if err != nil {
			t.Fatal(err)
		}
		p.frame(client.Frame{Line: []byte(l), Obj: o})
	}
	p.flush()
	want := "a-long-session  R1  user       \x1b[1;31m文件\x1b[0m and \x1b[1;31m文件\x1b[0m\n" +
		"s               R2  assistant  no  [31m\n"
	if out.String() != want {
		t.Fatalf("rows:\n%q\nwant\n%q", out.String(), want)
	}
}
