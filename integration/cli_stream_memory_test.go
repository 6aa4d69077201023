package integration

import (
	"strings"
	"testing"
	"time"
)

// TestCLIStreamIDsBounded: a CLI's stream (the CLI, or any process of the
// run's uid writing into its stdout) names 256 messages with ids of 1 MiB
// each, each streamed a delta: the parser remembers which messages were
// streamed, but not ids of that size, so the server's peak resident
// memory does not grow by their 256 MiB.
func TestCLIStreamIDsBounded(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("hostile", map[string]string{"cli": "claude-code\n", "program": `#!/usr/bin/python3
import sys
out = sys.stdout
for i in range(256):
    out.write('{"type":"stream_event","event":{"type":"message_start","message":{"id":"%08d%s"}}}\n' % (i, "x" * (1 << 20)))
    out.write('{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"."}}}\n')
out.write('{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"4bc00285-d2db-45dd-8cc8-3e3ba6199b24"}\n')
`})
	})
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	frames := s.mustRequest("hostile", `{"op":"send","id":"h1","session":"ids","input":"go"}`)
	if len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("the run did not end: %v", frames)
	}
	peak := vmKB(t, pid, "VmHWM")
	growth := (peak - base) / 1024
	t.Logf("server resident memory: %d MiB before, peak %d MiB (+%d MiB) for 256 message ids of 1 MiB", base/1024, peak/1024, growth)
	if growth > 128 {
		t.Errorf("peak resident memory grew by %d MiB: the stream's ids are held", growth)
	}
}

// TestCLIResultErrorsLinear: a Claude Code result event (the CLI's, or
// any process of the run's uid writing into its stdout) lists a million
// errors of one character in one 4 MB line. The error frame quotes the
// first KiB of them; they are not joined whole again at each one (a
// quadratic join held a core of the server for some twenty minutes a
// line, and the run could not end meanwhile).
func TestCLIResultErrorsLinear(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("hostile", map[string]string{"cli": "claude-code\n", "program": `#!/usr/bin/python3
import sys
sys.stdout.write('{"type":"result","subtype":"error_during_execution","is_error":true,"errors":[' + '"a",' * 1000000 + '"b"]}\n')
`})
	})
	began := time.Now()
	frames, err := s.requestWithin("hostile", `{"op":"send","id":"h1","session":"errs","input":"go"}`, time.Minute)
	if err != nil {
		t.Fatalf("the run did not end within a minute (%v): %d frames", err, len(frames))
	}
	t.Logf("the run ended in %v", time.Since(began))
	var quoted string
	for _, f := range frames {
		if f["type"] == "error" {
			quoted, _ = f["message"].(string)
		}
	}
	if last := frames[len(frames)-1]; last["type"] != "done" || last["status"] != "error" || !strings.HasPrefix(quoted, "claude-code: EIO: a a a") || len(quoted) > 2048 {
		t.Fatalf("want an error quoting the first errors, then done error; got %v", frames)
	}
}

// TestCLIStreamPartsBounded: a Claude Code assistant event (the CLI's,
// or any process of the run's uid writing into its stdout) holds 1.4
// million empty content parts in one 4 MiB line, four times. Each part
// the parser does not map would be a log frame, all held until the line's
// last went out (some 600 MiB of the root server's memory for one line);
// past the parts of a message it maps, the rest are said in one log
// frame, and the server's peak resident memory does not grow by hundreds
// of MiB.
func TestCLIStreamPartsBounded(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("hostile", map[string]string{"cli": "claude-code\n", "program": `#!/usr/bin/python3
import sys
line = '{"type":"assistant","message":{"id":"m","content":[' + '{},' * 1398000 + '{}]}}\n'
for i in range(4):
    sys.stdout.write(line)
sys.stdout.write('{"type":"result","subtype":"success","is_error":false,"result":"done"}\n')
`})
	})
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	// The send's reader may fall behind (EAGAIN): the run goes on, and
	// its end is what status says.
	s.requestWithin("hostile", `{"op":"send","id":"h1","session":"parts","input":"go"}`, 2*time.Minute)
	var st frame
	eventually(t, 2*time.Minute, "the run's end", func() bool {
		st = s.mustRequest("hostile", `{"op":"status","session":"parts"}`)[0]
		return st["state"] != "active"
	})
	peak := vmKB(t, pid, "VmHWM")
	growth := (peak - base) / 1024
	t.Logf("server resident memory: %d MiB before, peak %d MiB (+%d MiB) for four lines of 1.4 million parts; the session %v", base/1024, peak/1024, growth, st["state"])
	if growth > 128 {
		t.Errorf("peak resident memory grew by %d MiB: a frame is held for each part of a line", growth)
	}
	if events := fileBytes(t, s.mnt("home/0/agent/hostile/session/parts/events.jsonl")); st["state"] != "done" || !strings.Contains(events, "1396977 more parts of a message dropped") {
		t.Errorf("the run ended %v; its events do not say the parts past the bound were dropped", st["state"])
	}
}

// TestCLIToolResultPartsBounded: a Claude Code tool result (the CLI's,
// or any process of the run's uid writing into its stdout) whose content
// is 1.4 million empty parts in one 4 MiB line, four times. Its text is
// read part by part, not from a slice of every part decoded (some 900
// MiB of the root server's memory for one line), so the server's peak
// resident memory does not grow by hundreds of MiB.
func TestCLIToolResultPartsBounded(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("hostile", map[string]string{"cli": "claude-code\n", "program": `#!/usr/bin/python3
import sys
out = sys.stdout
out.write('{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}\n')
line = '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[' + '{},' * 1398000 + '{"text":"end"}]}]}}\n'
for i in range(4):
    out.write(line)
out.write('{"type":"result","subtype":"success","is_error":false,"result":"done"}\n')
`})
	})
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	frames, err := s.requestWithin("hostile", `{"op":"send","id":"h1","session":"results","input":"go"}`, 2*time.Minute)
	if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("the run did not end (%v): %d frames", err, len(frames))
	}
	peak := vmKB(t, pid, "VmHWM")
	growth := (peak - base) / 1024
	t.Logf("server resident memory: %d MiB before, peak %d MiB (+%d MiB) for four tool results of 1.4 million parts", base/1024, peak/1024, growth)
	if growth > 128 {
		t.Errorf("peak resident memory grew by %d MiB: a tool result's parts are held decoded", growth)
	}
	results := 0
	for _, f := range frames {
		if f["type"] == "tool_result" && f["content"] == "end" {
			results++
		}
	}
	if results != 4 {
		t.Errorf("want four tool results of text \"end\"; got %d", results)
	}
}

// TestCLIResultErrorsBounded: four Claude Code result events (the CLI's,
// or any process of the run's uid writing into its stdout) list a million
// errors of one character each in a 4 MB line. They are read one at a
// time up to what the error frame quotes, not decoded into a slice of
// them all, so the server's peak resident memory grows by what a 4 MB
// line of one error takes (37 MiB), not by 117-131 MiB.
func TestCLIResultErrorsBounded(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("hostile", map[string]string{"cli": "claude-code\n", "program": `#!/usr/bin/python3
import sys
for i in range(4):
    sys.stdout.write('{"type":"result","subtype":"error_during_execution","is_error":true,"errors":[' + '"a",' * 1000000 + '"b"]}\n')
`})
	})
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	frames, err := s.requestWithin("hostile", `{"op":"send","id":"h1","session":"errs","input":"go"}`, time.Minute)
	if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("the run did not end (%v): %d frames", err, len(frames))
	}
	peak := vmKB(t, pid, "VmHWM")
	growth := (peak - base) / 1024
	t.Logf("server resident memory: %d MiB before, peak %d MiB (+%d MiB) for four results of a million errors", base/1024, peak/1024, growth)
	if growth > 80 { // a 4 MB line of one error: +37 MiB
		t.Errorf("peak resident memory grew by %d MiB: a result's errors are held decoded", growth)
	}
}
