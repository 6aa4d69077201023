package permitmcp

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// control is a run's control socket as the tests play it: a real unix
// socket that records each request line and answers it with reply.
type control struct {
	path  string
	reply string
	mu    sync.Mutex
	got   []string
}

func newControl(t *testing.T, reply string) *control {
	t.Helper()
	c := &control{path: filepath.Join(t.TempDir(), "control"), reply: reply}
	l, err := net.Listen("unix", c.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			c.mu.Lock()
			c.got = append(c.got, strings.TrimSpace(line))
			c.mu.Unlock()
			conn.Write([]byte(c.reply + "\n"))
			conn.Close()
		}
	}()
	return c
}

func (c *control) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// exchange serves the lines given and returns the responses, each as an
// object, in the order written.
func exchange(t *testing.T, socket string, lines ...string) []map[string]any {
	t.Helper()
	var out strings.Builder
	serve(strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, socket)
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("response %q: %v", l, err)
		}
		got = append(got, m)
	}
	return got
}

// decision is the decision a tools/call response carries in its text.
func decision(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	content, _ := resp["result"].(map[string]any)["content"].([]any)
	if len(content) != 1 {
		t.Fatalf("response %v: want one content", resp)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(content[0].(map[string]any)["text"].(string)), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"permit","arguments":{"tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}}`

// TestPermitRelaysEachDecision: a call is relayed to the control socket as
// op permit with the tool use's id, name and input, and each answer of
// the server becomes Claude Code's decision; an error, a reply that is no
// frame and a socket that is not there are denials.
func TestPermitRelaysEachDecision(t *testing.T) {
	for _, c := range []struct {
		name, reply, behavior, message string
	}{
		{"allow once", `{"type":"permit","id":"toolu_1","decision":"allow_once"}`, "allow", ""},
		{"allow run", `{"type":"permit","id":"toolu_1","decision":"allow_run"}`, "allow", ""},
		{"deny with reason", `{"type":"permit","id":"toolu_1","decision":"deny","reason":"not that"}`, "deny", "denied: not that"},
		{"stop", `{"type":"permit","id":"toolu_1","decision":"stop"}`, "deny", "stopped by a person"},
		{"refused", `{"type":"error","code":"EINVAL","message":"bad id"}`, "deny", "ctxfs refused the permission request: EINVAL bad id"},
		{"not a frame", `garbage`, "deny", "ctxfs refused the permission request: EIO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctl := newControl(t, c.reply)
			resp := exchange(t, ctl.path, call)
			if len(resp) != 1 || resp[0]["id"] != float64(7) {
				t.Fatalf("responses %v", resp)
			}
			d := decision(t, resp[0])
			if d["behavior"] != c.behavior || !strings.HasPrefix(str(d["message"]), c.message) {
				t.Errorf("decision %v, want %s %q", d, c.behavior, c.message)
			}
			if c.behavior == "allow" && d["updatedInput"].(map[string]any)["command"] != "ls" {
				t.Errorf("allow changed the input: %v", d)
			}
			want := `{"op":"permit","id":"toolu_1","name":"Bash","arguments":{"command":"ls"}}`
			if got := ctl.requests(); len(got) != 1 || got[0] != want {
				t.Errorf("the control socket got %q, want %q", got, want)
			}
		})
	}
	for name, socket := range map[string]string{"no socket named": "", "no socket there": filepath.Join(t.TempDir(), "gone")} {
		d := decision(t, exchange(t, socket, call)[0])
		if d["behavior"] != "deny" {
			t.Errorf("%s: %v", name, d)
		}
	}
}

// TestPermitHostileLines: what the CLI writes is read as hostile. A line
// past the bound, a line that is not JSON, a notification and a response
// get nothing, an unknown method its JSON-RPC error, a call whose
// arguments cannot be read is denied without asking; the requests after
// each are still answered (a call's answer may come after a later
// request's: calls are answered as they are decided).
func TestPermitHostileLines(t *testing.T) {
	ctl := newControl(t, `{"type":"permit","id":"x","decision":"allow_once"}`)
	resp := exchange(t, ctl.path,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":"`+strings.Repeat("a", maxMCPLine)+`"}`,
		`{not json`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":"not an object"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping"}`,
	)
	byID := map[float64]map[string]any{}
	for _, r := range resp {
		byID[r["id"].(float64)] = r
	}
	if len(resp) != 3 || len(byID) != 3 {
		t.Fatalf("responses %v, want those of ids 3, 4 and 5", resp)
	}
	if e, _ := byID[3]["error"].(map[string]any); e == nil || e["code"] != float64(-32601) {
		t.Errorf("unknown method: %v", byID[3])
	}
	if d := decision(t, byID[4]); d["behavior"] != "deny" {
		t.Errorf("unreadable arguments: %v", byID[4])
	}
	if byID[5]["result"] == nil {
		t.Errorf("ping: %v", byID[5])
	}
	if got := ctl.requests(); len(got) != 0 {
		t.Errorf("the control socket was asked %q", got)
	}
}

// TestPermitHandshake: initialize answers the client's protocol version
// when it is one this server speaks, else its own; tools/list offers the
// one prompt tool with its input schema.
func TestPermitHandshake(t *testing.T) {
	resp := exchange(t, "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
	)
	if len(resp) != 3 {
		t.Fatalf("responses %v", resp)
	}
	version := func(r map[string]any) string { return str(r["result"].(map[string]any)["protocolVersion"]) }
	if version(resp[0]) != "2025-03-26" || version(resp[1]) != mcpVersion {
		t.Errorf("versions %q %q", version(resp[0]), version(resp[1]))
	}
	tools := resp[2]["result"].(map[string]any)["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["inputSchema"] == nil {
		t.Errorf("tools %v", tools)
	}
}

// TestPermitReplyBound: a control socket's reply is read up to one frame's
// bound: a longer one is not taken whole (a deny).
func TestPermitReplyBound(t *testing.T) {
	ctl := newControl(t, `{"type":"permit","id":"toolu_1","decision":"allow_once","reason":"`+strings.Repeat("r", abi.MaxLineBytes)+`"}`)
	if d := decision(t, exchange(t, ctl.path, call)[0]); d["behavior"] != "deny" {
		t.Errorf("an overlong reply was taken: %v", d["behavior"])
	}
}

func str(v any) string { s, _ := v.(string); return s }
