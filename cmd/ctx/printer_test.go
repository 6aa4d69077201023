package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/client"
)

// printFrames feeds a reply stream to a sendPrinter, as stream does.
func printFrames(t *testing.T, reply string, json bool, recorded func(string) string) (out, errs string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	p := newSendPrinter(&o, &e, json, recorded)
	fr := client.NewFrameReader(strings.NewReader(reply))
	for {
		f, err := fr.Next()
		if err == io.EOF {
			break
		}
		p.frame(f)
	}
	p.finish()
	code = p.exitStatus(nil)
	return o.String(), e.String(), code
}

const (
	start  = `{"type":"start","id":"R","run":"R"}` + "\n"
	doneOK = `{"type":"done","run":"R","status":"ok"}` + "\n"
)

func TestPrintDeltasNotMessage(t *testing.T) {
	reply := start + `{"type":"delta","run":"R","text":"hel"}` + "\n" +
		`{"type":"delta","run":"R","text":"lo"}` + "\n" +
		`{"type":"message","run":"R","role":"assistant","content":[{"type":"text","text":"hello"}]}` + "\n" + doneOK
	out, errs, code := printFrames(t, reply, false, nil)
	if out != "hello\n" || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}

func TestPrintMessagesWithoutDeltas(t *testing.T) {
	reply := start + `{"type":"message","run":"R","role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_call","id":"c","name":"x","arguments":{}}]}` + "\n" +
		`{"type":"tool_result","run":"R","tool_call_id":"c","content":"r"}` + "\n" +
		`{"type":"message","run":"R","role":"assistant","content":[{"type":"text","text":"b\n"}]}` + "\n" + doneOK
	out, _, code := printFrames(t, reply, false, nil)
	if out != "a\nb\n" || code != 0 {
		t.Fatalf("out %q code %d", out, code)
	}
}

func TestPrintErrorMidRunAndDoneStatus(t *testing.T) {
	reply := start + `{"type":"error","run":"R","code":"EIO","message":"model down"}` + "\n" +
		`{"type":"done","run":"R","status":"error"}` + "\n"
	out, errs, code := printFrames(t, reply, false, nil)
	if out != "" || errs != "ctx: error: EIO: model down\n" || code != 1 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
	_, _, code = printFrames(t, start+`{"type":"done","run":"R","status":"cancelled"}`+"\n", false, nil)
	if code != 1 {
		t.Fatalf("cancelled: code %d", code)
	}
}

func TestPrintRefusal(t *testing.T) {
	reply := `{"type":"error","code":"EACCES","message":"cwd leaves the chroot"}` + "\n"
	out, errs, code := printFrames(t, reply, false, nil)
	if out != "" || errs != "ctx: send: EACCES: cwd leaves the chroot\n" || code != 2 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}

func TestPrintNoDone(t *testing.T) {
	_, errs, code := printFrames(t, start+`{"type":"delta","run":"R","text":"x"}`+"\n", false, nil)
	if code != 1 || !strings.HasPrefix(errs, "ctx: send: EIO: no done frame") {
		t.Fatalf("errs %q code %d", errs, code)
	}
}

// A replay gets start and done only; the text comes from the session.
func TestPrintReplayUsesRecordedText(t *testing.T) {
	recorded := func(run string) string { return "recorded " + run }
	out, _, code := printFrames(t, start+doneOK, false, recorded)
	if out != "recorded R\n" || code != 0 {
		t.Fatalf("out %q code %d", out, code)
	}
}

func TestPrintJSONPassesLinesThrough(t *testing.T) {
	reply := start + `{"type":"delta","run":"R","text":"x"}` + "\n" + "garbage\n" + doneOK
	out, errs, code := printFrames(t, reply, true, func(string) string { return "never" })
	if out != reply || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}
