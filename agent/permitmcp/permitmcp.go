// Package permitmcp is `ctxfs __permit`, the permission prompt tool a
// coding-agent CLI of a run starts (Claude Code's --permission-prompt-tool,
// cli.Permit): a stdio MCP server whose one tool relays each question to
// the run's control socket (op permit) and answers the CLI with the
// decision. It runs as the run's uid, in its isolation, and decides
// nothing: every answer is the server's, and anything that fails is a
// deny.
package permitmcp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/proto"
)

// PermitCommand is the hidden command of the ctxfs binary that a CLI
// starts as its permission prompt tool (cli.Permit): `ctxfs __permit`, a
// stdio MCP server whose one tool asks the run's control socket
// (CTX_CONTROL_SOCKET) and answers the CLI with the decision.
const PermitCommand = "__permit"

// Bounds of the MCP server: a message line (a tool's input rides in one),
// and the calls it relays at once. One ask of the control socket keeps to
// the socket's own (proto.ControlRequestWait, proto.MaxControlRequest).
const (
	maxMCPLine       = 2 * abi.MaxLineBytes
	maxPermitsAtOnce = 4
)

// mcpVersion is the MCP protocol version answered when the client asks
// for one this server does not know.
const mcpVersion = "2025-06-18"

// mcpVersions are the versions whose initialize, tools/list and
// tools/call this server speaks (the same messages in each).
var mcpVersions = map[string]bool{"2024-11-05": true, "2025-03-26": true, "2025-06-18": true, "2025-11-25": true}

// permitToolSchema is the input of the prompt tool as Claude Code calls
// it: the tool it asks about, that tool's input, and the tool use's id.
var permitToolSchema = json.RawMessage(`{"type":"object","properties":{"tool_name":{"type":"string"},"input":{"type":"object"},"tool_use_id":{"type":"string"}},"required":["tool_name","input"]}`)

type mcpMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// PermitMain is `ctxfs __permit`: it serves MCP on stdin and stdout (one
// JSON-RPC message a line) until stdin ends. It runs as the run's uid, in
// its isolation, started by the CLI; it decides nothing: every answer
// comes from the server, and anything that fails is a deny.
func PermitMain(args []string) int {
	serve(os.Stdin, os.Stdout, os.Getenv(trampoline.ControlSocketEnv))
	return 0
}

// serve answers the MCP messages read from in on out until in ends,
// relaying each call of the prompt tool to the control socket at socket;
// a line that is too long, not JSON, or not a request gets nothing.
func serve(in io.Reader, stdout io.Writer, socket string) {
	out := &mcpWriter{w: bufio.NewWriter(stdout)}
	slots := make(chan struct{}, maxPermitsAtOnce)
	var wg sync.WaitGroup
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := proto.ReadLine(br, maxMCPLine)
		var m mcpMessage
		if !tooLong && json.Unmarshal(line, &m) == nil && len(m.ID) > 0 && m.Method != "" {
			if m.Method == "tools/call" {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-slots; wg.Done() }()
					out.result(m.ID, permitCall(socket, m.Params))
				}()
			} else {
				answerMCP(out, m)
			}
		}
		if err != nil {
			wg.Wait()
			return
		}
	}
}

// answerMCP answers every request but tools/call; notifications and
// responses have no method and id together, and get nothing.
func answerMCP(out *mcpWriter, m mcpMessage) {
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(m.Params, &p)
		v := mcpVersion
		if mcpVersions[p.ProtocolVersion] {
			v = p.ProtocolVersion
		}
		out.result(m.ID, map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": cli.PermitServer, "version": "1"}})
	case "tools/list":
		out.result(m.ID, map[string]any{"tools": []any{map[string]any{"name": cli.PermitTool,
			"description": "Asks the ctxfs server whether a tool use may run (a person decides).", "inputSchema": permitToolSchema}}})
	case "ping":
		out.result(m.ID, map[string]any{})
	default:
		out.error(m.ID, -32601, "method not found")
	}
}

// permitCall relays one call of the prompt tool to the control socket and
// returns the tool's result: a text content holding Claude Code's
// decision, allow with the input unchanged or deny with why.
func permitCall(socket string, params json.RawMessage) map[string]any {
	var p struct {
		Arguments struct {
			ToolName  string          `json:"tool_name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
		} `json:"arguments"`
	}
	decision := map[string]any{"behavior": "deny", "message": "ctxfs could not read the permission request"}
	if json.Unmarshal(params, &p) == nil {
		a := p.Arguments
		decision = decide(askControl(socket, proto.PermitRequest{ID: a.ToolUseID, Name: a.ToolName, Arguments: a.Input}), a.Input)
	}
	text, _ := json.Marshal(decision)
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": string(text)}}}
}

// decide turns the server's reply into Claude Code's decision.
func decide(f *proto.Object, input json.RawMessage) map[string]any {
	switch d := f.Str("decision"); {
	case f.Str("type") == proto.FrameError:
		return map[string]any{"behavior": "deny", "message": fmt.Sprintf("ctxfs refused the permission request: %s %s", f.Str("code"), f.Str("message"))}
	case d == proto.DecisionAllowOnce || d == proto.DecisionAllowRun:
		return map[string]any{"behavior": "allow", "updatedInput": input}
	case d == proto.DecisionStop:
		return map[string]any{"behavior": "deny", "message": "stopped by a person", "interrupt": true}
	case f.Str("reason") != "":
		return map[string]any{"behavior": "deny", "message": "denied: " + f.Str("reason")}
	}
	return map[string]any{"behavior": "deny", "message": "denied"}
}

// askControl sends one permit request to the control socket and returns
// the reply frame (an error frame when there is none).
func askControl(socket string, req proto.PermitRequest) *proto.Object {
	fail := func(err error) *proto.Object {
		return proto.NewObject("type", proto.FrameError, "code", "EIO", "message", err.Error())
	}
	if socket == "" {
		return fail(fmt.Errorf("%s is not set", trampoline.ControlSocketEnv))
	}
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	line, _ := json.Marshal(struct {
		Op string `json:"op"`
		proto.PermitRequest
	}{proto.OpPermit, req})
	conn.SetWriteDeadline(time.Now().Add(proto.ControlRequestWait))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return fail(err)
	}
	got, _, err := proto.ReadLine(bufio.NewReader(conn), proto.MaxControlRequest)
	f, perr := proto.ParseObject(got, false)
	switch {
	case perr == nil:
		return f
	case err != nil:
		return fail(err)
	}
	return fail(perr)
}

// mcpWriter writes JSON-RPC responses, one a line, from any goroutine.
type mcpWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *mcpWriter) result(id json.RawMessage, result any) {
	o.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (o *mcpWriter) error(id json.RawMessage, code int, msg string) {
	o.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func (o *mcpWriter) send(v any) {
	b, _ := json.Marshal(v)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}
