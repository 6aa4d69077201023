package send

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/client"
)

// printFrames feeds a reply stream to a SendPrinter, as stream does.
func printFrames(t *testing.T, reply string, json bool, recorded func(string) string) (out, errs string, code int) {
	t.Helper()
	return printWith(t, reply, NewSendPrinter(nil, nil, json, recorded))
}

// printWith is printFrames with a printer set up by the caller (its
// writers are replaced).
func printWith(t *testing.T, reply string, p *SendPrinter) (out, errs string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	p.out, p.errw = &o, &e
	fr := client.NewFrameReader(strings.NewReader(reply))
	for {
		f, err := fr.Next()
		if err == io.EOF {
			break
		}
		p.Frame(f)
	}
	p.Finish()
	code = p.ExitStatus(nil)
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

const toolReply = `{"type":"tool_call","run":"R","id":"c1","name":"fs.read","arguments":{ "path": "/etc/hosts", "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" }}` + "\n" +
	`{"type":"tool_result","run":"R","tool_call_id":"c1","content":"hello world"}` + "\n" +
	`{"type":"tool_call","run":"R","id":"c2","name":"sh","arguments":{}}` + "\n" +
	`{"type":"tool_result","run":"R","tool_call_id":"c2","name":"sh","content":[{"type":"text","text":"no such file\u001b[31m\nsecond line"}],"is_error":true}` + "\n"

// On a terminal each tool call and result is one line, cut to the width;
// the text around them keeps its own lines.
func TestPrintToolLinesOnTerminal(t *testing.T) {
	p := NewSendPrinter(nil, nil, false, nil)
	p.tools, p.width = true, 40
	reply := start + `{"type":"delta","run":"R","text":"looking"}` + "\n" + toolReply +
		`{"type":"delta","run":"R","text":"found it"}` + "\n" + doneOK
	out, errs, code := printWith(t, reply, p)
	call := []rune(`→ fs.read {"path":"/etc/hosts","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	want := "looking\n" +
		string(call[:39]) + "…\n" +
		"← fs.read ok, 11 bytes\n" +
		"→ sh {}\n" +
		"← sh error: no such file [31m\n" + // the escape is made harmless
		"found it\n"
	if out != want || errs != "" || code != 0 {
		t.Fatalf("out %q\nwant %q\nerrs %q code %d", out, want, errs, code)
	}
}

// In a pipe the output is the text alone.
func TestPrintNoToolLinesInPipe(t *testing.T) {
	reply := start + `{"type":"delta","run":"R","text":"looking "}` + "\n" + toolReply +
		`{"type":"delta","run":"R","text":"found it"}` + "\n" + doneOK
	out, errs, code := printFrames(t, reply, false, nil)
	if out != "looking found it\n" || errs != "" || code != 0 {
		t.Fatalf("out %q errs %q code %d", out, errs, code)
	}
}

func TestPrintAnnouncesRun(t *testing.T) {
	var ann bytes.Buffer
	p := NewSendPrinter(nil, nil, false, nil)
	p.announce = &ann
	printWith(t, start+doneOK, p)
	if ann.String() != "run R\n" {
		t.Fatalf("announced %q", ann.String())
	}
	ann.Reset()
	p = NewSendPrinter(nil, nil, true, nil)
	p.announce = &ann
	printWith(t, start+doneOK, p)
	if ann.Len() != 0 {
		t.Fatalf("--json announced %q", ann.String())
	}
}

func logLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(`{"type":"log","run":"R","stream":"stderr","text":"line ` + string(rune('0'+i)) + `"}` + "\n")
	}
	return b.String()
}

const doneError = `{"type":"done","run":"R","status":"error"}` + "\n"

// A failed run shows the last five lines of the agent's stderr after the
// error; a cancelled one and --json do not.
func TestPrintFailedRunShowsStderr(t *testing.T) {
	errFrame := `{"type":"error","run":"R","code":"EIO","message":"run: EIO: agent program exited with status 3"}` + "\n"
	_, errs, code := printFrames(t, start+logLines(6)+errFrame+doneError, false, nil)
	want := "ctx: error: EIO: run: agent program exited with status 3\n" +
		"ctx: send: last lines of the agent's stderr:\n  line 2\n  line 3\n  line 4\n  line 5\n  line 6\n"
	if errs != want || code != 1 {
		t.Fatalf("errs %q\nwant %q code %d", errs, want, code)
	}
	_, errs, _ = printFrames(t, start+logLines(2)+`{"type":"done","run":"R","status":"cancelled"}`+"\n", false, nil)
	if errs != "" {
		t.Fatalf("cancelled: errs %q", errs)
	}
	_, errs, _ = printFrames(t, start+logLines(2)+doneError, true, nil)
	if errs != "" {
		t.Fatalf("--json: errs %q", errs)
	}
}

// A replay carries no log frames: they are read from the session, and only
// then.
func TestPrintReplayedFailureReadsStderr(t *testing.T) {
	asked := 0
	p := NewSendPrinter(nil, nil, false, nil)
	p.recordedLog = func(run string, n int) []string {
		asked++
		if run != "R" || n != stderrShown {
			t.Errorf("recordedLog(%q, %d)", run, n)
		}
		return []string{"boom: API key missing"}
	}
	_, errs, code := printWith(t, start+doneError, p)
	if errs != "ctx: send: last lines of the agent's stderr:\n  boom: API key missing\n" || code != 1 {
		t.Fatalf("errs %q code %d", errs, code)
	}
	printWith(t, start+`{"type":"usage","run":"R"}`+"\n"+doneError, p)
	if asked != 1 {
		t.Fatalf("recordedLog asked %d times, want once (not for a reply that carried the run)", asked)
	}
}

func TestCutColumns(t *testing.T) {
	for _, c := range []struct {
		s     string
		width int
		want  string
	}{
		{"abcdef", 6, "abcdef"}, {"abcdef", 5, "abcd…"}, {"日本語テキスト", 4, "日本語…"}, {"abc", 0, "abc"},
	} {
		if got := cutColumns(c.s, c.width); got != c.want {
			t.Errorf("cutColumns(%q, %d) = %q, want %q", c.s, c.width, got, c.want)
		}
	}
}
